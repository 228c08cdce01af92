//! Users, members, bans and DM channels: the SQLite statements behind
//! [`MemberStore`] (the operations are in `crate::members`).

use rusqlite::{params, Connection, OptionalExtension};

use super::cached::Cached;
use crate::error::Result;
use crate::members::MemberStore;
use crate::model::*;
use crate::rows::{to_i, to_u};

fn user_row(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<User> {
    Ok(User {
        id: to_u(r.get(at)?),
        username: r.get(at + 1)?,
        global_name: r.get(at + 2)?,
    })
}

fn pairs(c: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<Vec<(u64, u64)>> {
    let mut st = c.prepare_cached(sql)?;
    let v = st
        .query_map(p, |r| {
            Ok((to_u(r.get::<_, i64>(0)?), to_u(r.get::<_, i64>(1)?)))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

impl MemberStore for &Connection {
    fn user(&mut self, id: u64) -> Result<Option<User>> {
        Ok(self
            .query_row_cached(
                "SELECT id, username, global_name FROM users WHERE id = ?1",
                [to_i(id)],
                |r| user_row(r, 0),
            )
            .optional()?)
    }

    fn insert_user(&mut self, u: &User, created_at_ms: u64) -> Result<()> {
        self.execute_cached(
            "INSERT INTO users (id, username, global_name, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
            params![to_i(u.id), u.username, u.global_name, to_i(created_at_ms)],
        )?;
        Ok(())
    }

    fn membership(
        &mut self,
        server_id: u64,
        user_id: u64,
    ) -> Result<Option<(Option<String>, u64)>> {
        Ok(self
            .query_row_cached(
                "SELECT nick, joined_at_ms FROM members WHERE server_id = ?1 AND user_id = ?2",
                params![to_i(server_id), to_i(user_id)],
                |r| Ok((r.get(0)?, to_u(r.get(1)?))),
            )
            .optional()?)
    }

    fn member_role_ids(&mut self, server_id: u64, user_id: u64) -> Result<Vec<u64>> {
        Ok(pairs(
            self,
            "SELECT user_id, role_id FROM member_roles
             WHERE server_id = ?1 AND user_id = ?2 ORDER BY role_id",
            params![to_i(server_id), to_i(user_id)],
        )?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
    }

    fn members_page(
        &mut self,
        server_id: u64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(User, Option<String>, u64)>> {
        let mut st = self.prepare_cached(
            "SELECT u.id, u.username, u.global_name, m.nick, m.joined_at_ms
             FROM members m JOIN users u ON u.id = m.user_id
             WHERE m.server_id = ?1 AND m.user_id > ?2 ORDER BY m.user_id LIMIT ?3",
        )?;
        let v = st
            .query_map(params![to_i(server_id), to_i(after), limit], |r| {
                Ok((user_row(r, 0)?, r.get(3)?, to_u(r.get(4)?)))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(v)
    }

    fn member_roles_between(
        &mut self,
        server_id: u64,
        after: u64,
        upto: u64,
    ) -> Result<Vec<(u64, u64)>> {
        pairs(
            self,
            "SELECT user_id, role_id FROM member_roles
             WHERE server_id = ?1 AND user_id > ?2 AND user_id <= ?3",
            params![to_i(server_id), to_i(after), to_i(upto)],
        )
    }

    fn insert_member(&mut self, server_id: u64, user_id: u64, joined_at_ms: u64) -> Result<()> {
        self.execute_cached(
            "INSERT INTO members (server_id, user_id, joined_at_ms) VALUES (?1, ?2, ?3)",
            params![to_i(server_id), to_i(user_id), to_i(joined_at_ms)],
        )?;
        Ok(())
    }

    fn delete_member(&mut self, server_id: u64, user_id: u64) -> Result<bool> {
        // member_roles cascades.
        Ok(self.execute_cached(
            "DELETE FROM members WHERE server_id = ?1 AND user_id = ?2",
            params![to_i(server_id), to_i(user_id)],
        )? > 0)
    }

    fn insert_member_role(&mut self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        Ok(self.execute_cached(
            "INSERT INTO member_roles (server_id, user_id, role_id) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
            params![to_i(server_id), to_i(user_id), to_i(role_id)],
        )? > 0)
    }

    fn delete_member_role(&mut self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        Ok(self.execute_cached(
            "DELETE FROM member_roles WHERE server_id = ?1 AND user_id = ?2 AND role_id = ?3",
            params![to_i(server_id), to_i(user_id), to_i(role_id)],
        )? > 0)
    }

    fn clear_member_roles(&mut self, server_id: u64, user_id: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM member_roles WHERE server_id = ?1 AND user_id = ?2",
            params![to_i(server_id), to_i(user_id)],
        )?;
        Ok(())
    }

    fn is_banned(&mut self, server_id: u64, user_id: u64) -> Result<bool> {
        Ok(self
            .query_row_cached(
                "SELECT 1 FROM bans WHERE server_id = ?1 AND user_id = ?2",
                params![to_i(server_id), to_i(user_id)],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    fn insert_ban(
        &mut self,
        server_id: u64,
        user_id: u64,
        reason: Option<&str>,
        at_ms: u64,
    ) -> Result<bool> {
        Ok(self.execute_cached(
            "INSERT INTO bans (server_id, user_id, reason, created_at_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT DO NOTHING",
            params![to_i(server_id), to_i(user_id), reason, to_i(at_ms)],
        )? > 0)
    }

    fn delete_ban(&mut self, server_id: u64, user_id: u64) -> Result<bool> {
        Ok(self.execute_cached(
            "DELETE FROM bans WHERE server_id = ?1 AND user_id = ?2",
            params![to_i(server_id), to_i(user_id)],
        )? > 0)
    }

    fn dm_channel(&mut self, low: u64, high: u64) -> Result<Option<u64>> {
        Ok(self
            .query_row_cached(
                "SELECT id FROM dm_channels WHERE user_low = ?1 AND user_high = ?2",
                params![to_i(low), to_i(high)],
                |r| r.get::<_, i64>(0).map(to_u),
            )
            .optional()?)
    }

    fn insert_dm_channel(&mut self, id: u64, low: u64, high: u64) -> Result<()> {
        self.execute_cached(
            "INSERT INTO dm_channels (id, user_low, user_high) VALUES (?1, ?2, ?3)",
            params![to_i(id), to_i(low), to_i(high)],
        )?;
        Ok(())
    }

    fn dm_channels_of(&mut self, user_id: u64) -> Result<Vec<(u64, u64)>> {
        pairs(
            self,
            "SELECT id, user_high FROM dm_channels WHERE user_low = ?1
             UNION ALL
             SELECT id, user_low FROM dm_channels WHERE user_high = ?1
             ORDER BY 1",
            [to_i(user_id)],
        )
    }
}
