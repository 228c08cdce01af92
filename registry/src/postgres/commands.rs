//! Application commands: the PostgreSQL statements behind [`CommandStore`]
//! (the operations are in `crate::commands`).

use tokio_postgres::Row;

use super::conn::{col, Tx};
use crate::commands::CommandStore;
use crate::error::Result;
use crate::model::Command;
use crate::rows::{self, to_i, COMMAND_COLS};

fn command_row(r: &Row) -> Result<Command> {
    Ok(rows::command((
        col(r, 0)?,
        col(r, 1)?,
        col(r, 2)?,
        col(r, 3)?,
        col(r, 4)?,
        col::<i16>(r, 5)? as u8,
        col(r, 6)?,
        col(r, 7)?,
        col(r, 8)?,
        col(r, 9)?,
    )))
}

impl CommandStore for Tx<'_> {
    fn commands_in(&mut self, app_id: u64, scope: u64) -> Result<Vec<Command>> {
        self.query(
            &format!(
                "SELECT {COMMAND_COLS} FROM commands
                 WHERE application_id = $1 AND guild_id = $2 ORDER BY id"
            ),
            &[&to_i(app_id), &to_i(scope)],
        )?
        .iter()
        .map(command_row)
        .collect()
    }

    fn command_by_id(&mut self, id: u64) -> Result<Option<Command>> {
        self.query_opt(
            &format!("SELECT {COMMAND_COLS} FROM commands WHERE id = $1"),
            &[&to_i(id)],
        )?
        .map(|r| command_row(&r))
        .transpose()
    }

    fn insert_command(&mut self, c: &Command) -> Result<()> {
        self.execute(
            &format!(
                "INSERT INTO commands ({COMMAND_COLS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            &[
                &to_i(c.id),
                &to_i(c.application_id),
                &to_i(c.guild_id.unwrap_or(0)),
                &c.name,
                &c.description,
                &i16::from(c.kind),
                &c.options_json,
                &c.default_member_permissions.map(to_i),
                &c.nsfw,
                &to_i(c.version),
            ],
        )?;
        Ok(())
    }

    fn update_command(&mut self, c: &Command) -> Result<()> {
        self.execute(
            "UPDATE commands SET name = $2, description = $3, options = $4,
             default_member_permissions = $5, nsfw = $6, version = $7 WHERE id = $1",
            &[
                &to_i(c.id),
                &c.name,
                &c.description,
                &c.options_json,
                &c.default_member_permissions.map(to_i),
                &c.nsfw,
                &to_i(c.version),
            ],
        )?;
        Ok(())
    }

    fn delete_command(&mut self, id: u64) -> Result<bool> {
        Ok(self.execute("DELETE FROM commands WHERE id = $1", &[&to_i(id)])? > 0)
    }

    fn creates_on(&mut self, app_id: u64, scope: u64, day: i64) -> Result<u32> {
        let n: i64 = match self.query_opt(
            "SELECT count FROM command_creates
             WHERE application_id = $1 AND guild_id = $2 AND day = $3",
            &[&to_i(app_id), &to_i(scope), &day],
        )? {
            Some(r) => col(&r, 0)?,
            None => 0,
        };
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    fn add_creates(&mut self, app_id: u64, scope: u64, day: i64, n: u32) -> Result<()> {
        self.execute(
            "DELETE FROM command_creates WHERE application_id = $1 AND guild_id = $2 AND day < $3",
            &[&to_i(app_id), &to_i(scope), &day],
        )?;
        self.execute(
            "INSERT INTO command_creates (application_id, guild_id, day, count)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (application_id, guild_id, day)
             DO UPDATE SET count = command_creates.count + EXCLUDED.count",
            &[&to_i(app_id), &to_i(scope), &day, &i64::from(n)],
        )?;
        Ok(())
    }
}
