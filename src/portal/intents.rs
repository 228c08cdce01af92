//! Privileged intents: what an application is approved for, what its
//! author asks for, and the operator who decides (issue 29, docs/portal.md
//! "Intents and the operator").
//!
//! - The author's Settings show approved and requested intents and a form
//!   that replaces the request (`POST /api/request-intents`); what is
//!   requested and not approved is pending.
//! - An operator signs in to the portal with the node's `admin_token`
//!   (off while it is empty) and sees every pending request with Approve
//!   and Deny (`POST /operator/intents`); the CLI does the same
//!   (`gatewayd registry intents requests|approve|deny`). Approving is
//!   `set_approved_intents(approved | requested)`, so running sessions get
//!   the change as any approval (a revocation when bits are withdrawn).

use std::fmt::Write;

use serde_json::json;

use super::ctx::Ctx;
use super::html::esc;
use super::http::{Request, Response};
use super::names::PRIVILEGED_INTENTS;
use super::sessions::{self, Session};

/// The names of the privileged intents in `bits` ("none" if none).
pub fn names(bits: u64) -> String {
    let v: Vec<&str> = PRIVILEGED_INTENTS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The Settings block: approved, requested, pending, and the request form.
pub fn settings(b: &mut String, app: &registry::Application) {
    let pending = app.requested_intents & !app.approved_intents;
    let wanted = app.approved_intents | app.requested_intents;
    let _ = write!(
        b,
        "<h3 id=\"h-intents\">Privileged intents</h3>\
         <p>Approved: <span id=\"intents-approved\">{}</span>. Pending an operator's approval: \
         <span id=\"intents-pending\">{}</span>.</p>\
         <form id=\"intents\" class=\"tool\" data-api=\"/api/request-intents\"><fieldset><legend>Request</legend>",
        names(app.approved_intents),
        names(pending),
    );
    for (bit, name) in PRIVILEGED_INTENTS {
        let _ = write!(
            b,
            "<label class=\"perm\"><input type=\"checkbox\" name=\"{name}\" value=\"on\"{}> {name}</label>",
            if wanted & bit != 0 { " checked" } else { "" },
        );
    }
    b.push_str(
        "</fieldset><p>The request replaces the last one; an operator approves or denies it. \
         A privileged intent asked for in an Identify before it is approved closes the session with 4014.</p>\
         <button type=\"submit\">Send the request</button><output id=\"intents-result\" role=\"status\"></output></form>",
    );
}

/// `POST /api/request-intents`: the checked intents replace the request.
pub fn request(ctx: &Ctx, s: &Session, req: &Request) -> Response {
    let bits = PRIVILEGED_INTENTS
        .iter()
        .filter(|(_, n)| req.field(n).as_deref() == Some("on"))
        .fold(0u64, |m, (b, _)| m | b);
    let done = ctx.registry().request_intents(s.app, bits);
    match done {
        Ok(app) => {
            let pending = app.requested_intents & !app.approved_intents;
            let result = if pending == 0 {
                "nothing pending: everything asked for is approved".to_string()
            } else {
                format!(
                    "requested; pending an operator's approval: {}",
                    names(pending)
                )
            };
            Response::json(
                200,
                &json!({"result": result, "pending": names(pending), "approved": names(app.approved_intents)}),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "portal: intents request: registry");
            Response::json(
                503,
                &json!({"error": "the registry is unavailable: try again soon"}),
            )
        }
    }
}

/// Whether `given` is the node's admin token (false while none is set).
pub fn operator_token(ctx: &Ctx, given: &str) -> bool {
    let token = &ctx.v.shared.cfg.admin_token;
    !token.is_empty() && sessions::same(token, given.trim())
}

/// The operator's page: every pending request, with Approve and Deny.
pub fn operator_page(ctx: &Ctx, s: &Session, b: &mut String) {
    let list = ctx.registry().intent_requests();
    b.push_str(
        "<section aria-labelledby=\"h-requests\"><h2 id=\"h-requests\">Privileged intent requests</h2>",
    );
    match list {
        Err(_) => b.push_str("<p class=\"error\">The registry is unavailable: reload soon.</p>"),
        Ok(apps) if apps.is_empty() => {
            b.push_str("<p id=\"no-requests\">Nothing pending.</p>");
        }
        Ok(apps) => {
            b.push_str(
                "<table><caption>Pending, by application</caption><thead><tr><th scope=\"col\">Application</th>\
                 <th scope=\"col\">Approved</th><th scope=\"col\">Pending</th><th scope=\"col\">Decide</th></tr></thead>\
                 <tbody id=\"requests\">",
            );
            for a in &apps {
                let form = |action: &str, label: &str| {
                    format!(
                        "<form method=\"post\" action=\"/operator/intents\" class=\"inline\">\
                         <input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"app\" value=\"{}\">\
                         <input type=\"hidden\" name=\"action\" value=\"{action}\">\
                         <button type=\"submit\" id=\"{action}-{}\">{label}</button></form>",
                        esc(&s.csrf),
                        a.id,
                        a.id
                    )
                };
                let _ = write!(
                    b,
                    "<tr><td data-label=\"Application\">{} <code>{}</code></td><td data-label=\"Approved\">{}</td>\
                     <td data-label=\"Pending\">{}</td><td data-label=\"Decide\">{}{}</td></tr>",
                    esc(&a.name),
                    a.id,
                    names(a.approved_intents),
                    names(a.requested_intents & !a.approved_intents),
                    form("approve", "Approve"),
                    form("deny", "Deny"),
                );
            }
            b.push_str("</tbody></table>");
        }
    }
    b.push_str(
        "<p>The same from a shell: <code>gatewayd registry intents requests</code>, \
         <code>gatewayd registry intents approve APP_ID</code>, <code>gatewayd registry intents deny APP_ID</code>.</p></section>",
    );
}

/// `POST /operator/intents` (`app`, `action` approve|deny): 303 back.
pub fn decide(ctx: &Ctx, s: &Session, req: &Request) -> Response {
    if !s.operator {
        return Response::json(403, &json!({"error": "operators only"}));
    }
    let app = req.field("app").and_then(|a| a.parse::<u64>().ok());
    let action = req.field("action");
    let (Some(app), Some(action)) = (app, action) else {
        return Response::json(400, &json!({"error": "app and action (approve or deny)"}));
    };
    let done = {
        let r = ctx.registry();
        match (action.as_str(), r.application(app)) {
            (_, Ok(None)) => return Response::json(404, &json!({"error": "no such application"})),
            ("approve", Ok(Some(a))) => {
                r.set_approved_intents(app, a.approved_intents | a.requested_intents)
            }
            ("deny", Ok(Some(a))) => {
                r.request_intents(app, a.requested_intents & a.approved_intents)
            }
            (_, Ok(Some(_))) => {
                return Response::json(400, &json!({"error": "action: approve or deny"}))
            }
            (_, Err(e)) => Err(e),
        }
    };
    match done {
        Ok(_) => {
            tracing::info!(app, action, "portal: operator decided an intents request");
            Response::see_other("/")
        }
        Err(e) => {
            tracing::warn!(error = %e, "portal: operator decision: registry");
            Response::json(
                503,
                &json!({"error": "the registry is unavailable: try again soon"}),
            )
        }
    }
}
