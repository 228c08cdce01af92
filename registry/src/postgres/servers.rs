//! Servers, roles, channels and permission overwrites: the PostgreSQL
//! statements behind [`ServerStore`] (the operations are in `crate::ops`).

use tokio_postgres::Row;

use super::conn::{col, Tx};
use crate::error::Result;
use crate::model::*;
use crate::ops::ServerStore;
use crate::rows::{self, to_i, to_u, CHANNEL_COLS, ROLE_COLS, SERVER_COLS};

fn server_row(r: &Row) -> Result<Server> {
    Ok(rows::server((
        col(r, 0)?,
        col(r, 1)?,
        col(r, 2)?,
        col(r, 3)?,
    )))
}

fn role_row(r: &Row) -> Result<Role> {
    Ok(rows::role((
        col(r, 0)?,
        col(r, 1)?,
        col(r, 2)?,
        col(r, 3)?,
        col(r, 4)?,
        col::<i64>(r, 5)? as u32,
        col(r, 6)?,
        col(r, 7)?,
        col(r, 8)?,
    )))
}

fn channel_row(r: &Row) -> Result<Channel> {
    Ok(rows::channel((
        col(r, 0)?,
        col(r, 1)?,
        col(r, 2)?,
        col::<i16>(r, 3)? as u8,
        col(r, 4)?,
        col(r, 5)?,
        col(r, 6)?,
    )))
}

impl ServerStore for Tx<'_> {
    fn server(&mut self, id: u64) -> Result<Option<Server>> {
        self.query_opt(
            &format!("SELECT {SERVER_COLS} FROM servers WHERE id = $1"),
            &[&to_i(id)],
        )?
        .map(|r| server_row(&r))
        .transpose()
    }

    fn servers(&mut self) -> Result<Vec<Server>> {
        self.query(
            &format!("SELECT {SERVER_COLS} FROM servers ORDER BY id"),
            &[],
        )?
        .iter()
        .map(server_row)
        .collect()
    }

    fn insert_server(&mut self, s: &Server) -> Result<()> {
        self.execute(
            "INSERT INTO servers (id, name, owner_id, created_at_ms) VALUES ($1, $2, $3, $4)",
            &[
                &to_i(s.id),
                &s.name,
                &to_i(s.owner_id),
                &to_i(s.created_at_ms),
            ],
        )?;
        Ok(())
    }

    fn rename_server(&mut self, id: u64, name: &str) -> Result<()> {
        self.execute(
            "UPDATE servers SET name = $2 WHERE id = $1",
            &[&to_i(id), &name],
        )?;
        Ok(())
    }

    fn delete_server(&mut self, id: u64) -> Result<bool> {
        // Cascades: roles, channels, overwrites, installations, installation roles.
        // Commands have no foreign key (their scope 0 is no server).
        self.execute("DELETE FROM commands WHERE guild_id = $1", &[&to_i(id)])?;
        Ok(self.execute("DELETE FROM servers WHERE id = $1", &[&to_i(id)])? > 0)
    }

    fn role(&mut self, id: u64) -> Result<Option<Role>> {
        self.query_opt(
            &format!("SELECT {ROLE_COLS} FROM roles WHERE id = $1"),
            &[&to_i(id)],
        )?
        .map(|r| role_row(&r))
        .transpose()
    }

    fn roles_of(&mut self, server_id: u64) -> Result<Vec<Role>> {
        self.query(
            &format!("SELECT {ROLE_COLS} FROM roles WHERE server_id = $1 ORDER BY position, id"),
            &[&to_i(server_id)],
        )?
        .iter()
        .map(role_row)
        .collect()
    }

    fn next_role_position(&mut self, server_id: u64) -> Result<i32> {
        let r = self.query_one(
            "SELECT COALESCE(MAX(position), 0) + 1 FROM roles WHERE server_id = $1",
            &[&to_i(server_id)],
        )?;
        col(&r, 0)
    }

    fn insert_role(&mut self, r: &Role) -> Result<()> {
        self.execute(
            "INSERT INTO roles (id, server_id, name, permissions, position, managed)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &to_i(r.id),
                &to_i(r.server_id),
                &r.name,
                &to_i(r.permissions),
                &r.position,
                &r.managed,
            ],
        )?;
        Ok(())
    }

    fn upsert_role(&mut self, role: &Role) -> Result<()> {
        self.execute(
            "INSERT INTO roles (id, server_id, name, permissions, position, color, hoist,
                                mentionable, managed)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, FALSE)
             ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name,
               permissions = EXCLUDED.permissions, position = EXCLUDED.position,
               color = EXCLUDED.color, hoist = EXCLUDED.hoist,
               mentionable = EXCLUDED.mentionable",
            &[
                &to_i(role.id),
                &to_i(role.server_id),
                &role.name,
                &to_i(role.permissions),
                &role.position,
                &i64::from(role.color),
                &role.hoist,
                &role.mentionable,
            ],
        )?;
        Ok(())
    }

    fn set_role_permissions(&mut self, role_id: u64, perms: u64) -> Result<()> {
        self.execute(
            "UPDATE roles SET permissions = $2 WHERE id = $1",
            &[&to_i(role_id), &to_i(perms)],
        )?;
        Ok(())
    }

    fn delete_role(&mut self, role_id: u64) -> Result<()> {
        self.execute(
            "DELETE FROM overwrites WHERE target_id = $1 AND target_kind = 0",
            &[&to_i(role_id)],
        )?;
        self.execute("DELETE FROM roles WHERE id = $1", &[&to_i(role_id)])?;
        Ok(())
    }

    fn channel(&mut self, id: u64) -> Result<Option<Channel>> {
        self.query_opt(
            &format!("SELECT {CHANNEL_COLS} FROM channels WHERE id = $1"),
            &[&to_i(id)],
        )?
        .map(|r| channel_row(&r))
        .transpose()
    }

    fn channels_of(&mut self, server_id: u64) -> Result<Vec<Channel>> {
        self.query(
            &format!(
                "SELECT {CHANNEL_COLS} FROM channels WHERE server_id = $1 ORDER BY position, id"
            ),
            &[&to_i(server_id)],
        )?
        .iter()
        .map(channel_row)
        .collect()
    }

    fn next_channel_position(&mut self, server_id: u64) -> Result<i32> {
        let r = self.query_one(
            "SELECT COALESCE(MAX(position), -1) + 1 FROM channels WHERE server_id = $1",
            &[&to_i(server_id)],
        )?;
        col(&r, 0)
    }

    fn insert_channel(&mut self, ch: &Channel) -> Result<()> {
        self.execute(
            "INSERT INTO channels (id, server_id, name, kind, position, parent_id)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &to_i(ch.id),
                &to_i(ch.server_id),
                &ch.name,
                &i16::from(ch.kind),
                &ch.position,
                &ch.parent_id.map(to_i),
            ],
        )?;
        Ok(())
    }

    fn replace_channel(&mut self, ch: &Channel, overwrites: &[Overwrite]) -> Result<()> {
        self.execute(
            "INSERT INTO channels (id, server_id, name, kind, position, parent_id, topic)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, kind = EXCLUDED.kind,
               position = EXCLUDED.position, parent_id = EXCLUDED.parent_id,
               topic = EXCLUDED.topic",
            &[
                &to_i(ch.id),
                &to_i(ch.server_id),
                &ch.name,
                &i16::from(ch.kind),
                &ch.position,
                &ch.parent_id.filter(|p| *p != ch.id).map(to_i),
                &ch.topic,
            ],
        )?;
        self.execute(
            "DELETE FROM overwrites WHERE channel_id = $1",
            &[&to_i(ch.id)],
        )?;
        for (ord, o) in overwrites.iter().enumerate() {
            self.execute(
                "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (channel_id, target_id) DO UPDATE
                 SET target_kind = EXCLUDED.target_kind, allow = EXCLUDED.allow,
                     deny = EXCLUDED.deny",
                &[
                    &to_i(ch.id),
                    &to_i(o.target_id),
                    &i16::from(o.kind.as_u8()),
                    &to_i(o.allow),
                    &to_i(o.deny),
                    &i32::try_from(ord).unwrap_or(i32::MAX),
                ],
            )?;
        }
        Ok(())
    }

    fn delete_channel(&mut self, id: u64) -> Result<()> {
        self.execute("DELETE FROM channels WHERE id = $1", &[&to_i(id)])?;
        Ok(())
    }

    fn find_channel(&mut self, server_id: u64, name: &str, kind: u8) -> Result<Option<u64>> {
        self.query_opt(
            "SELECT id FROM channels WHERE server_id = $1 AND name = $2 AND kind = $3
             ORDER BY position, id LIMIT 1",
            &[&to_i(server_id), &name, &i16::from(kind)],
        )?
        .map(|r| col::<i64>(&r, 0).map(to_u))
        .transpose()
    }

    fn set_overwrite(&mut self, channel_id: u64, o: &Overwrite) -> Result<()> {
        // New overwrites go last; an update keeps its `ord`.
        self.execute(
            "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
             VALUES ($1, $2, $3, $4, $5,
                     (SELECT COALESCE(MAX(ord), -1) + 1 FROM overwrites WHERE channel_id = $1))
             ON CONFLICT (channel_id, target_id) DO UPDATE
             SET target_kind = EXCLUDED.target_kind, allow = EXCLUDED.allow, deny = EXCLUDED.deny",
            &[
                &to_i(channel_id),
                &to_i(o.target_id),
                &i16::from(o.kind.as_u8()),
                &to_i(o.allow),
                &to_i(o.deny),
            ],
        )?;
        Ok(())
    }

    fn delete_overwrite(&mut self, channel_id: u64, target_id: u64) -> Result<bool> {
        Ok(self.execute(
            "DELETE FROM overwrites WHERE channel_id = $1 AND target_id = $2",
            &[&to_i(channel_id), &to_i(target_id)],
        )? > 0)
    }

    fn overwrites_of(&mut self, server_id: u64) -> Result<Vec<(u64, Overwrite)>> {
        self.query(
            "SELECT o.channel_id, o.target_id, o.target_kind, o.allow, o.deny
             FROM overwrites o JOIN channels ch ON ch.id = o.channel_id
             WHERE ch.server_id = $1 ORDER BY o.channel_id, o.ord",
            &[&to_i(server_id)],
        )?
        .iter()
        .map(|r| {
            let kind = col::<i16>(r, 2)? as u8;
            let ow = rows::overwrite(col(r, 1)?, kind, col(r, 3)?, col(r, 4)?);
            Ok((to_u(col(r, 0)?), ow))
        })
        .collect()
    }
}
