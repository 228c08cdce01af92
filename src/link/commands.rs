//! The sidecar's application command routes: a permitted request (the
//! worker checked the application and the installation, and validated the
//! body: `api::commands`) is answered from the registry, which holds the
//! commands for every node and applies the platform's limits (100 of a
//! kind per scope, 200 creates a day per scope: `registry::commands`).
//!
//! Answers: GET a list or one command, PUT 200 with the scope's new list,
//! POST 201 on a create and 200 on an update, PATCH 200, DELETE 204; an
//! unknown command is 404 code 10063, a full scope 400 code 30032, the
//! daily creates 429 code 30034 (with `retry_after` until the next UTC day;
//! the worker adds `Retry-After` and `Via`: `api::headers::handoff_429`).

use super::*;
use crate::api::body::{codes, ApiError};
use crate::api::commands::{
    command_json, patch, CommandOp, MAX_COMMANDS_REACHED, MAX_DAILY_CREATES, UNKNOWN_COMMAND,
};
use registry::model::{Command, COMMAND_DAY_MS};
use registry::RegistryError;

fn unknown_command() -> ApiError {
    ApiError::new(404, UNKNOWN_COMMAND, "Unknown application command")
}

/// A registry failure as the bot sees it.
fn registry_error(e: RegistryError) -> ApiError {
    match e {
        RegistryError::NotFound {
            what: "command", ..
        } => unknown_command(),
        RegistryError::NotFound {
            what: "application",
            ..
        } => ApiError::new(404, 10002, "Unknown Application"),
        RegistryError::NotFound { .. } => ApiError::new(404, codes::UNKNOWN_GUILD, "Unknown Guild"),
        RegistryError::LimitReached { what, max } if what == registry::commands::DAILY_CREATES => {
            let now = now_ms();
            let left_ms = COMMAND_DAY_MS - now % COMMAND_DAY_MS;
            let mut e = ApiError::new(
                429,
                MAX_DAILY_CREATES,
                &format!(
                    "Max number of daily application command creates has been reached ({max})"
                ),
            );
            e.body["retry_after"] = json!(left_ms as f64 / 1000.0);
            e.body["global"] = false.into();
            e
        }
        RegistryError::LimitReached { max, .. } => ApiError::new(
            400,
            MAX_COMMANDS_REACHED,
            &format!("Maximum number of application commands reached ({max})"),
        ),
        RegistryError::Invalid(m) => ApiError::form("_body", "APPLICATION_COMMAND_INVALID", &m),
        _ => ApiError::new(503, 0, "registry unavailable"),
    }
}

fn body(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

fn list(cmds: &[Command]) -> Vec<u8> {
    body(&serde_json::Value::Array(
        cmds.iter().map(command_json).collect(),
    ))
}

impl Sidecar {
    pub(super) fn api_commands(&mut self, req: CommandsRequest) {
        let (status, body) = match self.commands_outcome(req.call) {
            Ok(answer) => answer,
            Err(e) => (e.status, e.to_bytes()),
        };
        self.reply(
            req.worker,
            ToWorker::RestReply {
                conn: req.conn,
                status,
                body,
            },
        );
    }

    fn commands_outcome(
        &mut self,
        call: crate::api::commands::CommandCall,
    ) -> Result<(u16, Vec<u8>), ApiError> {
        let (app, guild) = (call.app, call.guild);
        Ok(match call.op {
            CommandOp::List => {
                let cmds = self
                    .call(|r| r.commands(app, guild))
                    .map_err(registry_error)?;
                (200, list(&cmds))
            }
            CommandOp::Get(id) => {
                let c = self
                    .call(|r| r.command(app, guild, id))
                    .map_err(registry_error)?
                    .ok_or_else(unknown_command)?;
                (200, body(&command_json(&c)))
            }
            CommandOp::Put(cmds) => {
                let out = self
                    .call(|r| r.put_commands(app, guild, &cmds))
                    .map_err(registry_error)?;
                (200, list(&out))
            }
            CommandOp::Create(cmd) => {
                let (c, created) = self
                    .call(|r| r.create_command(app, guild, &cmd))
                    .map_err(registry_error)?;
                (if created { 201 } else { 200 }, body(&command_json(&c)))
            }
            CommandOp::Edit(id, fields) => {
                // The name and description rules depend on the command's type.
                let old = self
                    .call(|r| r.command(app, guild, id))
                    .map_err(registry_error)?
                    .ok_or_else(unknown_command)?;
                let p = patch(&fields, old.kind)?;
                let c = self
                    .call(|r| r.edit_command(app, guild, id, &p))
                    .map_err(registry_error)?;
                (200, body(&command_json(&c)))
            }
            CommandOp::Delete(id) => {
                if !self
                    .call(|r| r.delete_command(app, guild, id))
                    .map_err(registry_error)?
                {
                    return Err(unknown_command());
                }
                (204, Vec::new())
            }
        })
    }
}
