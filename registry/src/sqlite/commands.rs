//! Application commands: the SQLite statements behind [`CommandStore`]
//! (the operations are in `crate::commands`).

use rusqlite::{params, Connection, OptionalExtension};

use super::cached::Cached;
use crate::commands::CommandStore;
use crate::error::Result;
use crate::model::Command;
use crate::rows::{self, to_i, COMMAND_COLS};

fn command_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Command> {
    Ok(rows::command((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
    )))
}

impl CommandStore for &Connection {
    fn commands_in(&mut self, app_id: u64, scope: u64) -> Result<Vec<Command>> {
        let mut st = self.prepare_cached(&format!(
            "SELECT {COMMAND_COLS} FROM commands
             WHERE application_id = ?1 AND guild_id = ?2 ORDER BY id"
        ))?;
        let v = st
            .query_map(params![to_i(app_id), to_i(scope)], command_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(v)
    }

    fn command_by_id(&mut self, id: u64) -> Result<Option<Command>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {COMMAND_COLS} FROM commands WHERE id = ?1"),
                [to_i(id)],
                command_row,
            )
            .optional()?)
    }

    fn insert_command(&mut self, c: &Command) -> Result<()> {
        self.execute_cached(
            &format!(
                "INSERT INTO commands ({COMMAND_COLS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            params![
                to_i(c.id),
                to_i(c.application_id),
                to_i(c.guild_id.unwrap_or(0)),
                c.name,
                c.description,
                c.kind,
                c.options_json,
                c.default_member_permissions.map(to_i),
                c.nsfw,
                to_i(c.version)
            ],
        )?;
        Ok(())
    }

    fn update_command(&mut self, c: &Command) -> Result<()> {
        self.execute_cached(
            "UPDATE commands SET name = ?2, description = ?3, options = ?4,
             default_member_permissions = ?5, nsfw = ?6, version = ?7 WHERE id = ?1",
            params![
                to_i(c.id),
                c.name,
                c.description,
                c.options_json,
                c.default_member_permissions.map(to_i),
                c.nsfw,
                to_i(c.version)
            ],
        )?;
        Ok(())
    }

    fn delete_command(&mut self, id: u64) -> Result<bool> {
        Ok(self.execute_cached("DELETE FROM commands WHERE id = ?1", [to_i(id)])? > 0)
    }

    fn creates_on(&mut self, app_id: u64, scope: u64, day: i64) -> Result<u32> {
        let n: Option<i64> = self
            .query_row_cached(
                "SELECT count FROM command_creates
                 WHERE application_id = ?1 AND guild_id = ?2 AND day = ?3",
                params![to_i(app_id), to_i(scope), day],
                |r| r.get(0),
            )
            .optional()?;
        Ok(u32::try_from(n.unwrap_or(0)).unwrap_or(u32::MAX))
    }

    fn add_creates(&mut self, app_id: u64, scope: u64, day: i64, n: u32) -> Result<()> {
        self.execute_cached(
            "DELETE FROM command_creates WHERE application_id = ?1 AND guild_id = ?2 AND day < ?3",
            params![to_i(app_id), to_i(scope), day],
        )?;
        self.execute_cached(
            "INSERT INTO command_creates (application_id, guild_id, day, count)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (application_id, guild_id, day)
             DO UPDATE SET count = command_creates.count + excluded.count",
            params![to_i(app_id), to_i(scope), day, n],
        )?;
        Ok(())
    }
}
