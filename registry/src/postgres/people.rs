//! Users, members, bans and DM channels: the PostgreSQL statements behind
//! [`MemberStore`] (the operations are in `crate::members`).

use tokio_postgres::Row;

use super::conn::{col, Tx};
use crate::error::Result;
use crate::members::MemberStore;
use crate::model::*;
use crate::rows::{to_i, to_u};

fn user_row(r: &Row, at: usize) -> Result<User> {
    Ok(User {
        id: to_u(col(r, at)?),
        username: col(r, at + 1)?,
        global_name: col(r, at + 2)?,
    })
}

fn pairs(rows: Vec<Row>) -> Result<Vec<(u64, u64)>> {
    rows.iter()
        .map(|r| Ok((to_u(col(r, 0)?), to_u(col(r, 1)?))))
        .collect()
}

impl MemberStore for Tx<'_> {
    fn user(&mut self, id: u64) -> Result<Option<User>> {
        self.query_opt(
            "SELECT id, username, global_name FROM users WHERE id = $1",
            &[&to_i(id)],
        )?
        .map(|r| user_row(&r, 0))
        .transpose()
    }

    fn insert_user(&mut self, u: &User, created_at_ms: u64) -> Result<()> {
        self.execute(
            "INSERT INTO users (id, username, global_name, created_at_ms) VALUES ($1, $2, $3, $4)",
            &[
                &to_i(u.id),
                &u.username,
                &u.global_name,
                &to_i(created_at_ms),
            ],
        )?;
        Ok(())
    }

    fn membership(
        &mut self,
        server_id: u64,
        user_id: u64,
    ) -> Result<Option<(Option<String>, u64)>> {
        self.query_opt(
            "SELECT nick, joined_at_ms FROM members WHERE server_id = $1 AND user_id = $2",
            &[&to_i(server_id), &to_i(user_id)],
        )?
        .map(|r| Ok((col(&r, 0)?, to_u(col(&r, 1)?))))
        .transpose()
    }

    fn member_role_ids(&mut self, server_id: u64, user_id: u64) -> Result<Vec<u64>> {
        let rows = self.query(
            "SELECT user_id, role_id FROM member_roles
             WHERE server_id = $1 AND user_id = $2 ORDER BY role_id",
            &[&to_i(server_id), &to_i(user_id)],
        )?;
        Ok(pairs(rows)?.into_iter().map(|(_, r)| r).collect())
    }

    fn members_page(
        &mut self,
        server_id: u64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(User, Option<String>, u64)>> {
        self.query(
            "SELECT u.id, u.username, u.global_name, m.nick, m.joined_at_ms
             FROM members m JOIN users u ON u.id = m.user_id
             WHERE m.server_id = $1 AND m.user_id > $2 ORDER BY m.user_id LIMIT $3",
            &[&to_i(server_id), &to_i(after), &i64::from(limit)],
        )?
        .iter()
        .map(|r| Ok((user_row(r, 0)?, col(r, 3)?, to_u(col(r, 4)?))))
        .collect()
    }

    fn member_roles_between(
        &mut self,
        server_id: u64,
        after: u64,
        upto: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let rows = self.query(
            "SELECT user_id, role_id FROM member_roles
             WHERE server_id = $1 AND user_id > $2 AND user_id <= $3",
            &[&to_i(server_id), &to_i(after), &to_i(upto)],
        )?;
        pairs(rows)
    }

    fn insert_member(&mut self, server_id: u64, user_id: u64, joined_at_ms: u64) -> Result<()> {
        self.execute(
            "INSERT INTO members (server_id, user_id, joined_at_ms) VALUES ($1, $2, $3)",
            &[&to_i(server_id), &to_i(user_id), &to_i(joined_at_ms)],
        )?;
        Ok(())
    }

    fn delete_member(&mut self, server_id: u64, user_id: u64) -> Result<bool> {
        // member_roles cascades.
        Ok(self.execute(
            "DELETE FROM members WHERE server_id = $1 AND user_id = $2",
            &[&to_i(server_id), &to_i(user_id)],
        )? > 0)
    }

    fn insert_member_role(&mut self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        Ok(self.execute(
            "INSERT INTO member_roles (server_id, user_id, role_id) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            &[&to_i(server_id), &to_i(user_id), &to_i(role_id)],
        )? > 0)
    }

    fn delete_member_role(&mut self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        Ok(self.execute(
            "DELETE FROM member_roles WHERE server_id = $1 AND user_id = $2 AND role_id = $3",
            &[&to_i(server_id), &to_i(user_id), &to_i(role_id)],
        )? > 0)
    }

    fn clear_member_roles(&mut self, server_id: u64, user_id: u64) -> Result<()> {
        self.execute(
            "DELETE FROM member_roles WHERE server_id = $1 AND user_id = $2",
            &[&to_i(server_id), &to_i(user_id)],
        )?;
        Ok(())
    }

    fn is_banned(&mut self, server_id: u64, user_id: u64) -> Result<bool> {
        Ok(self
            .query_opt(
                "SELECT 1 FROM bans WHERE server_id = $1 AND user_id = $2",
                &[&to_i(server_id), &to_i(user_id)],
            )?
            .is_some())
    }

    fn insert_ban(
        &mut self,
        server_id: u64,
        user_id: u64,
        reason: Option<&str>,
        at_ms: u64,
    ) -> Result<bool> {
        Ok(self.execute(
            "INSERT INTO bans (server_id, user_id, reason, created_at_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
            &[&to_i(server_id), &to_i(user_id), &reason, &to_i(at_ms)],
        )? > 0)
    }

    fn delete_ban(&mut self, server_id: u64, user_id: u64) -> Result<bool> {
        Ok(self.execute(
            "DELETE FROM bans WHERE server_id = $1 AND user_id = $2",
            &[&to_i(server_id), &to_i(user_id)],
        )? > 0)
    }

    fn dm_channel(&mut self, low: u64, high: u64) -> Result<Option<u64>> {
        self.query_opt(
            "SELECT id FROM dm_channels WHERE user_low = $1 AND user_high = $2",
            &[&to_i(low), &to_i(high)],
        )?
        .map(|r| Ok(to_u(col(&r, 0)?)))
        .transpose()
    }

    fn insert_dm_channel(&mut self, id: u64, low: u64, high: u64) -> Result<()> {
        self.execute(
            "INSERT INTO dm_channels (id, user_low, user_high) VALUES ($1, $2, $3)",
            &[&to_i(id), &to_i(low), &to_i(high)],
        )?;
        Ok(())
    }

    fn dm_channels_of(&mut self, user_id: u64) -> Result<Vec<(u64, u64)>> {
        let rows = self.query(
            "SELECT id, user_high FROM dm_channels WHERE user_low = $1
             UNION ALL
             SELECT id, user_low FROM dm_channels WHERE user_high = $1
             ORDER BY 1",
            &[&to_i(user_id)],
        )?;
        pairs(rows)
    }
}
