//! Servers, roles, channels and permission overwrites: the SQLite statements
//! behind [`ServerStore`] (the operations are in `crate::ops`).

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::cached::Cached;
use crate::error::Result;
use crate::model::*;
use crate::ops::ServerStore;
use crate::rows::{self, to_i, to_u, CHANNEL_COLS, ROLE_COLS, SERVER_COLS};

fn server_row(r: &Row<'_>) -> rusqlite::Result<Server> {
    rows::ServerRow::try_from(r).map(rows::server)
}

fn role_row(r: &Row<'_>) -> rusqlite::Result<Role> {
    rows::RoleRow::try_from(r).map(rows::role)
}

fn channel_row(r: &Row<'_>) -> rusqlite::Result<Channel> {
    rows::ChannelRow::try_from(r).map(rows::channel)
}

impl ServerStore for &Connection {
    fn server(&mut self, id: u64) -> Result<Option<Server>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {SERVER_COLS} FROM servers WHERE id = ?1"),
                [to_i(id)],
                server_row,
            )
            .optional()?)
    }

    fn servers(&mut self) -> Result<Vec<Server>> {
        let mut st =
            self.prepare_cached(&format!("SELECT {SERVER_COLS} FROM servers ORDER BY id"))?;
        let v = st
            .query_map([], server_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(v)
    }

    fn insert_server(&mut self, s: &Server) -> Result<()> {
        self.execute_cached(
            "INSERT INTO servers (id, name, owner_id, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
            params![to_i(s.id), s.name, to_i(s.owner_id), to_i(s.created_at_ms)],
        )?;
        Ok(())
    }

    fn rename_server(&mut self, id: u64, name: &str) -> Result<()> {
        self.execute_cached(
            "UPDATE servers SET name = ?2 WHERE id = ?1",
            params![to_i(id), name],
        )?;
        Ok(())
    }

    fn delete_server(&mut self, id: u64) -> Result<bool> {
        // Cascades: roles, channels, overwrites, installations, installation roles.
        // Commands have no foreign key (their scope 0 is no server).
        self.execute_cached("DELETE FROM commands WHERE guild_id = ?1", [to_i(id)])?;
        Ok(self.execute_cached("DELETE FROM servers WHERE id = ?1", [to_i(id)])? > 0)
    }

    fn role(&mut self, id: u64) -> Result<Option<Role>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {ROLE_COLS} FROM roles WHERE id = ?1"),
                [to_i(id)],
                role_row,
            )
            .optional()?)
    }

    fn roles_of(&mut self, server_id: u64) -> Result<Vec<Role>> {
        Ok(self
            .prepare_cached(&format!(
                "SELECT {ROLE_COLS} FROM roles WHERE server_id = ?1 ORDER BY position, id"
            ))?
            .query_map([to_i(server_id)], role_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn next_role_position(&mut self, server_id: u64) -> Result<i32> {
        Ok(self.query_row_cached(
            "SELECT COALESCE(MAX(position), 0) + 1 FROM roles WHERE server_id = ?1",
            [to_i(server_id)],
            |r| r.get(0),
        )?)
    }

    fn insert_role(&mut self, r: &Role) -> Result<()> {
        self.execute_cached(
            "INSERT INTO roles (id, server_id, name, permissions, position, managed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                to_i(r.id),
                to_i(r.server_id),
                r.name,
                to_i(r.permissions),
                r.position,
                r.managed
            ],
        )?;
        Ok(())
    }

    fn upsert_role(&mut self, role: &Role) -> Result<()> {
        self.execute_cached(
            "INSERT INTO roles (id, server_id, name, permissions, position, color, hoist, mentionable, managed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, permissions = excluded.permissions,
               position = excluded.position, color = excluded.color, hoist = excluded.hoist,
               mentionable = excluded.mentionable",
            params![
                to_i(role.id),
                to_i(role.server_id),
                role.name,
                to_i(role.permissions),
                role.position,
                role.color,
                role.hoist,
                role.mentionable
            ],
        )?;
        Ok(())
    }

    fn set_role_permissions(&mut self, role_id: u64, perms: u64) -> Result<()> {
        self.execute_cached(
            "UPDATE roles SET permissions = ?2 WHERE id = ?1",
            params![to_i(role_id), to_i(perms)],
        )?;
        Ok(())
    }

    fn delete_role(&mut self, role_id: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM overwrites WHERE target_id = ?1 AND target_kind = 0",
            [to_i(role_id)],
        )?;
        self.execute_cached("DELETE FROM roles WHERE id = ?1", [to_i(role_id)])?;
        Ok(())
    }

    fn channel(&mut self, id: u64) -> Result<Option<Channel>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {CHANNEL_COLS} FROM channels WHERE id = ?1"),
                [to_i(id)],
                channel_row,
            )
            .optional()?)
    }

    fn channels_of(&mut self, server_id: u64) -> Result<Vec<Channel>> {
        Ok(self
            .prepare_cached(&format!(
                "SELECT {CHANNEL_COLS} FROM channels WHERE server_id = ?1 ORDER BY position, id"
            ))?
            .query_map([to_i(server_id)], channel_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn next_channel_position(&mut self, server_id: u64) -> Result<i32> {
        Ok(self.query_row_cached(
            "SELECT COALESCE(MAX(position), -1) + 1 FROM channels WHERE server_id = ?1",
            [to_i(server_id)],
            |r| r.get(0),
        )?)
    }

    fn insert_channel(&mut self, ch: &Channel) -> Result<()> {
        self.execute_cached(
            "INSERT INTO channels (id, server_id, name, kind, position, parent_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                to_i(ch.id),
                to_i(ch.server_id),
                ch.name,
                ch.kind,
                ch.position,
                ch.parent_id.map(to_i)
            ],
        )?;
        Ok(())
    }

    fn replace_channel(&mut self, ch: &Channel, overwrites: &[Overwrite]) -> Result<()> {
        self.execute_cached(
            "INSERT INTO channels (id, server_id, name, kind, position, parent_id, topic)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, kind = excluded.kind,
               position = excluded.position, parent_id = excluded.parent_id, topic = excluded.topic",
            params![
                to_i(ch.id),
                to_i(ch.server_id),
                ch.name,
                ch.kind,
                ch.position,
                ch.parent_id.filter(|p| *p != ch.id).map(to_i),
                ch.topic
            ],
        )?;
        self.execute_cached(
            "DELETE FROM overwrites WHERE channel_id = ?1",
            [to_i(ch.id)],
        )?;
        for (ord, o) in overwrites.iter().enumerate() {
            self.execute_cached(
                "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (channel_id, target_id) DO UPDATE
                 SET target_kind = excluded.target_kind, allow = excluded.allow, deny = excluded.deny",
                params![to_i(ch.id), to_i(o.target_id), o.kind.as_u8(), to_i(o.allow), to_i(o.deny), ord as i64],
            )?;
        }
        Ok(())
    }

    fn delete_channel(&mut self, id: u64) -> Result<()> {
        self.execute_cached("DELETE FROM channels WHERE id = ?1", [to_i(id)])?;
        Ok(())
    }

    fn find_channel(&mut self, server_id: u64, name: &str, kind: u8) -> Result<Option<u64>> {
        Ok(self
            .query_row_cached(
                "SELECT id FROM channels WHERE server_id = ?1 AND name = ?2 AND kind = ?3
                 ORDER BY position, id LIMIT 1",
                params![to_i(server_id), name, kind],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(to_u))
    }

    fn set_overwrite(&mut self, channel_id: u64, o: &Overwrite) -> Result<()> {
        // New overwrites go last; an update keeps its `ord`.
        self.execute_cached(
            "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
             VALUES (?1, ?2, ?3, ?4, ?5,
                     (SELECT COALESCE(MAX(ord), -1) + 1 FROM overwrites WHERE channel_id = ?1))
             ON CONFLICT (channel_id, target_id) DO UPDATE
             SET target_kind = excluded.target_kind, allow = excluded.allow, deny = excluded.deny",
            params![
                to_i(channel_id),
                to_i(o.target_id),
                o.kind.as_u8(),
                to_i(o.allow),
                to_i(o.deny)
            ],
        )?;
        Ok(())
    }

    fn delete_overwrite(&mut self, channel_id: u64, target_id: u64) -> Result<bool> {
        Ok(self.execute_cached(
            "DELETE FROM overwrites WHERE channel_id = ?1 AND target_id = ?2",
            params![to_i(channel_id), to_i(target_id)],
        )? > 0)
    }

    fn overwrites_of(&mut self, server_id: u64) -> Result<Vec<(u64, Overwrite)>> {
        let mut st = self.prepare_cached(
            "SELECT o.channel_id, o.target_id, o.target_kind, o.allow, o.deny
             FROM overwrites o JOIN channels ch ON ch.id = o.channel_id
             WHERE ch.server_id = ?1 ORDER BY o.channel_id, o.ord",
        )?;
        let v = st
            .query_map([to_i(server_id)], |r| {
                let (channel, target, kind, allow, deny) = r.try_into()?;
                Ok((to_u(channel), rows::overwrite(target, kind, allow, deny)))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(v)
    }
}
