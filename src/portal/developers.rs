//! Developer accounts in the portal (issue 29, docs/portal.md "Developer
//! accounts"): a person signs in with a name and a password (an argon2id
//! hash in the registry, `gatewayd registry developer add`) and sees the
//! applications they own; the bot-token sign-in stays for automation.
//!
//! Ownership is the registry's and is checked on every request of a
//! developer's session, not only at sign-in: an application disowned (or
//! deleted) while its page is open is gone at the next request, and a
//! switch to an application the developer does not own is refused (403)
//! whatever the form says. A registry that does not answer refuses the
//! request (503) rather than show what it could not check.

use std::fmt::Write;

use serde_json::json;

use super::ctx::{lock, Ctx};
use super::html::esc;
use super::http::{Request, Response};
use super::sessions::Session;

/// Longest name and password read from the form (the registry's own
/// limits are tighter; these only bound what is passed to it).
const MAX_NAME: usize = 256;
const MAX_PASSWORD: usize = 1024;

/// The developer's name and password from the sign-in form, if it is that
/// form; None: not a developer sign-in (the token form).
pub fn credentials(req: &Request) -> Option<(String, String)> {
    let name = req.field("name")?;
    let password = req.field("password").unwrap_or_default();
    Some((name.trim().to_string(), password))
}

/// Whether these credentials are worth asking the registry (an empty or
/// huge field is a failed sign-in without a KDF run).
pub fn plausible(name: &str, password: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !password.is_empty()
        && password.len() <= MAX_PASSWORD
}

/// Re-checks a developer's session against the registry: the application
/// shown is still theirs (else none is shown). Err: the answer to give
/// instead (the registry could not say).
pub fn check(ctx: &Ctx, id: &str, s: &mut Session) -> Result<(), Response> {
    let Some((dev, _)) = s.developer.clone() else {
        return Ok(());
    };
    if s.app == 0 {
        return Ok(());
    }
    let owns = ctx.registry().developer_owns(dev, s.app);
    match owns {
        Ok(true) => Ok(()),
        Ok(false) => {
            s.app = 0;
            s.app_name.clear();
            if let Some(live) = lock(&ctx.sessions).get(id, std::time::Instant::now()) {
                live.app = 0;
                live.app_name.clear();
            }
            Ok(())
        }
        Err(e) => {
            tracing::warn!(error = %e, "portal: ownership check: registry unavailable");
            Err(Response::json(
                503,
                &json!({"error": "the registry is unavailable: try again soon"}),
            ))
        }
    }
}

/// `POST /switch` (`app=<id>`): show another application of the
/// developer's. 303 to the page; 403 if it is not theirs.
pub fn switch(ctx: &Ctx, id: &str, s: &Session, req: &Request) -> Response {
    let Some((dev, _)) = &s.developer else {
        return Response::json(
            403,
            &json!({"error": "signed in with a bot token: one application only"}),
        );
    };
    let Some(app) = req.field("app").and_then(|a| a.parse::<u64>().ok()) else {
        return Response::json(400, &json!({"error": "app: an application id"}));
    };
    // One registry guard for both reads (it is a mutex).
    let owned = {
        let r = ctx.registry();
        match r.developer_owns(*dev, app) {
            Ok(true) => r.application(app),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        }
    };
    match owned {
        Ok(Some(a)) => {
            if let Some(live) = lock(&ctx.sessions).get(id, std::time::Instant::now()) {
                live.app = a.id;
                live.app_name = a.name;
            }
            Response::see_other("/")
        }
        Ok(None) => Response::json(403, &json!({"error": "not one of your applications"})),
        Err(e) => {
            tracing::warn!(error = %e, "portal: switch: registry unavailable");
            Response::json(
                503,
                &json!({"error": "the registry is unavailable: try again soon"}),
            )
        }
    }
}

/// The developer's applications: a form per application to open it, the
/// one shown marked. Empty: how an operator gives them one.
pub fn picker(ctx: &Ctx, s: &Session, b: &mut String) {
    let Some((dev, name)) = &s.developer else {
        return;
    };
    let apps = ctx.registry().applications_of_developer(*dev);
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-apps\" id=\"apps\"><h2 id=\"h-apps\">Your applications</h2>\
         <p>Signed in as <strong id=\"developer-name\">{}</strong>.</p>",
        esc(name)
    );
    match apps {
        Err(_) => b.push_str("<p class=\"error\">The registry is unavailable: reload soon.</p>"),
        Ok(apps) if apps.is_empty() => {
            let _ = write!(
                b,
                "<p id=\"no-apps\">You own no application yet. An operator gives you one with \
                 <code>gatewayd registry developer own {} &lt;APP_ID&gt;</code>.</p>",
                esc(name)
            );
        }
        Ok(apps) => {
            b.push_str("<ul class=\"apps\" id=\"app-list\">");
            for a in &apps {
                let shown = a.id == s.app;
                let _ = write!(
                    b,
                    "<li><form method=\"post\" action=\"/switch\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                     <input type=\"hidden\" name=\"app\" value=\"{}\">\
                     <button type=\"submit\" class=\"{}\" data-app=\"{}\"{}>{}</button> <code>{}</code></form></li>",
                    esc(&s.csrf),
                    a.id,
                    if shown { "link shown" } else { "link" },
                    a.id,
                    if shown { " aria-current=\"page\"" } else { "" },
                    esc(&a.name),
                    a.id,
                );
            }
            b.push_str("</ul>");
        }
    }
    b.push_str("</section>");
}
