//! The portal's HTML. Every value that came from anyone (server, channel,
//! command and application names, errors) goes through `esc`; the page's
//! script fills in live figures with `textContent`, never as markup. No
//! inline script or style: the Content-Security-Policy allows only the
//! portal's own script and style sheet (`assets.rs`), shipped in the binary.

use std::fmt::Write;

use super::ctx::Ctx;
use super::html::esc;
use super::sessions::Session;
use super::{assets, installs, names};

fn shell(title: &str, csrf: Option<&str>, body: &str) -> String {
    let meta = csrf.map_or(String::new(), |c| {
        format!("<meta name=\"csrf\" content=\"{}\">", esc(c))
    });
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{meta}\
         <title>{} · gatewayd developer portal</title>\
         <link rel=\"icon\" href=\"{}\" type=\"image/svg+xml\">\
         <link rel=\"stylesheet\" href=\"{}\">\
         <script src=\"{}\" defer></script></head>\
         <body>{body}</body></html>\n",
        esc(title),
        assets::icon().path,
        assets::css().path,
        assets::js().path,
    )
}

pub fn signin(pre: &str, error: Option<&str>) -> String {
    let error = error.map_or(String::new(), |e| {
        format!(
            "<p class=\"error\" role=\"alert\" id=\"signin-error\">{}</p>",
            esc(e)
        )
    });
    let body = format!(
        "<main class=\"narrow\"><h1>Developer portal</h1>\
         <p>Sign in with your application's bot token to see its health and test it. \
         The token is checked once and never stored in the browser; the session ends \
         when you sign out or after a while unused.</p>{error}\
         <form method=\"post\" action=\"/signin\" id=\"signin\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{0}\">\
         <label for=\"token\">Bot token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required>\
         <button type=\"submit\" id=\"signin-button\">Sign in</button></form>\
         <h2>Developer account</h2>\
         <p>Or sign in as a person, and see every application you own.</p>\
         <form method=\"post\" action=\"/signin\" id=\"dev-signin\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{0}\">\
         <label for=\"dev-name\">Name</label>\
         <input id=\"dev-name\" name=\"name\" autocomplete=\"username\" required>\
         <label for=\"dev-password\">Password</label>\
         <input id=\"dev-password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required>\
         <button type=\"submit\" id=\"dev-signin-button\">Sign in</button></form>\
         <details><summary>Operator</summary>\
         <form method=\"post\" action=\"/signin\" id=\"op-signin\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{0}\">\
         <label for=\"admin-token\">The node's admin token</label>\
         <input id=\"admin-token\" name=\"admin_token\" type=\"password\" autocomplete=\"off\" required>\
         <button type=\"submit\" id=\"op-signin-button\">Sign in as the operator</button></form></details></main>",
        esc(pre)
    );
    shell("Sign in", None, &body)
}

fn stat(id: &str, label: &str) -> String {
    format!("<div class=\"stat\"><span class=\"label\">{label}</span><span class=\"value\" id=\"{id}\">–</span></div>")
}

fn table(id: &str, caption: &str, heads: &[&str]) -> String {
    let th: String = heads
        .iter()
        .map(|h| format!("<th scope=\"col\">{h}</th>"))
        .collect();
    format!("<table><caption>{caption}</caption><thead><tr>{th}</tr></thead><tbody id=\"{id}\"></tbody></table>")
}

/// Sign out, as a form (the header of every signed-in page).
fn signout_form(s: &Session) -> String {
    format!(
        "<form method=\"post\" action=\"/signout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button type=\"submit\" id=\"signout\">Sign out</button></form>",
        esc(&s.csrf)
    )
}

/// The operator's page (signed in with the admin token).
pub fn operator(ctx: &Ctx, s: &Session) -> String {
    let mut b = format!(
        "<header><h1>Operator</h1><p class=\"sub\">Signed in with the node's admin token</p>{}</header><main>",
        signout_form(s)
    );
    super::intents::operator_page(ctx, s, &mut b);
    b.push_str("</main>");
    shell("Operator", Some(&s.csrf), &b)
}

pub fn dashboard(ctx: &Ctx, s: &Session) -> String {
    if s.app == 0 {
        // A developer with no application open: their list.
        let mut b = format!(
            "<header><h1>Developer portal</h1>{}</header><main>",
            signout_form(s)
        );
        super::developers::picker(ctx, s, &mut b);
        b.push_str("</main>");
        return shell("Your applications", Some(&s.csrf), &b);
    }
    let app = ctx.registry().application(s.app).ok().flatten();
    let Some(app) = app else {
        return shell(
            "Gone",
            None,
            "<main><p>The application no longer exists.</p></main>",
        );
    };
    let (installs, total) = installs::of_app(ctx, &app).unwrap_or_default();
    let commands = ctx.registry().commands(app.id, None).unwrap_or_default();
    let mut b = String::with_capacity(16 << 10);
    let _ = write!(
        b,
        "<header><h1>{}</h1><p class=\"sub\">Application <code id=\"app-id\">{}</code></p>{}</header><main>",
        esc(&app.name),
        app.id,
        signout_form(s)
    );
    super::developers::picker(ctx, s, &mut b);
    let node = ctx.v.shared.node();
    if node != 0 {
        cluster_section(&mut b, node);
    }
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-sessions\"><h2 id=\"h-sessions\">Sessions{}</h2>\
         <div class=\"stats\">{}{}{}{}{}{}</div>\
         <p id=\"degraded-note\" class=\"warn\" role=\"status\" hidden></p>{}{}\
         <figure><svg id=\"chart-sessions\" role=\"img\" aria-label=\"Live sessions per minute, last hour\" viewBox=\"0 0 600 160\"></svg>\
         <figcaption>Live sessions per minute (each minute's highest of its 10 s samples), last hour; x: minutes before now</figcaption></figure></section>",
        if node != 0 { " on this node" } else { "" },
        stat("live", "Live"),
        stat("degraded", "Degraded (send queue ≥ 80 %)"),
        stat("detached", "Detached (resumable)"),
        stat("events-rate", "Events / s"),
        stat("identifies-hour", "Identifies, last hour"),
        stat("resumes-hour", "Resumes, last hour"),
        table("by-worker", "By worker", &["Worker", "Live", "Degraded", "Detached"]),
        table("by-shard", "Live by shard", &["Shard", "Live", "Degraded"]),
    );
    session_list_section(&mut b, node);
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-budget\"><h2 id=\"h-budget\">Identify budget</h2>\
         <div class=\"stats\">{}{}{}</div></section>",
        stat("budget-remaining", "session_start_limit remaining"),
        stat("budget-reset", "Resets in"),
        stat("budget-concurrency", "max_concurrency"),
    );
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-ix\"><h2 id=\"h-ix\">Interactions</h2>\
         <div class=\"stats\">{}{}{}{}{}{}{}{}{}</div>{}\
         <figure><svg id=\"chart-ack\" role=\"img\" aria-label=\"Ack latency p50 and p99 per minute, estimated within buckets, against the 3 second limit\" viewBox=\"0 0 600 160\"></svg>\
         <figcaption>Ack latency per minute (p50, p99, estimated within latency buckets) against the 3 s line; x: minutes before now</figcaption></figure></section>",
        stat("ack-rate", "Ack rate"),
        stat("ack-p50", "p50"),
        stat("ack-p99", "p99"),
        stat("misses", "Missed (no answer in 3 s)"),
        stat("deferrals", "Deferred"),
        stat("late", "Late callbacks"),
        stat("double", "Double acks"),
        stat("opened", "Opened"),
        stat("refused-ix", "Refused (not delivered)"),
        table("endpoint-failures", "Endpoint delivery failures", &["Reason", "Count"]),
    );
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-delivery\"><h2 id=\"h-delivery\">Delivery on this node</h2>\
         <p>Every bot's events, not only this application's: from the event's commit in the stream to its frame handed to the kernel.</p>\
         <figure><svg id=\"chart-delivery\" role=\"img\" aria-label=\"Delivery latency p50 and p99 per minute, estimated within buckets, against the 800 millisecond line\" viewBox=\"0 0 600 160\"></svg>\
         <figcaption>Delivery latency per minute (commit to socket; p50, p99, estimated within latency buckets) against the 800 ms line; x: minutes before now</figcaption></figure>\
         <div class=\"stats\">{}{}</div>{}{}</section>",
        stat("resume-attempts", "Resumes timed"),
        stat("resume-expired", "Refused: window passed"),
        table("reconnect-gaps", "Resumes by time away (disconnect to Resume)", &["Away up to", "Resumes"]),
        table("reconnect-windows", "What a resume window would have refused", &["Window", "Refused", "Note"]),
    );
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-starts\"><h2 id=\"h-starts\">Sessions that did not start</h2>\
         <p>Identifies and Resumes refused before a session (re)started, since this node started \
         (a bad token, 4004, names no application and is not counted here). Detail: the \
         privileged intents a 4014 asked for, or why a Resume was refused.</p>{}{}</section>\
         <section aria-labelledby=\"h-closes\"><h2 id=\"h-closes\">Closes sent, last hour</h2>{}</section>\
         <section aria-labelledby=\"h-rest\"><h2 id=\"h-rest\">REST</h2>{}{}</section>",
        table("start-refusals", "Refused starts by reason", &["Refused", "Count", "What to do"]),
        table("start-recent", "The last refused starts", &["When", "Refused", "Detail"]),
        table("closes", "Gateway close codes", &["Code", "Count", "Meaning", "What to do"]),
        table("rest", "Requests by route and status <span id=\"rest-window\" class=\"sub\"></span>", &["Route", "Status", "Count"]),
        table("limited", "429s by bucket", &["Route", "Scope", "Count"]),
    );
    settings_section(&mut b, ctx, &app);
    commands_section(&mut b, ctx, &app, &commands, &installs);
    install_link_section(&mut b, &app);
    tools_section(&mut b, &installs, &commands);
    installs_section(&mut b, &app, &installs, total);
    b.push_str("</main>");
    shell(&app.name, Some(&s.csrf), &b)
}

/// The sessions one by one (paged by portal.js from `/api/sessions`) and
/// their last lifecycle events.
fn session_list_section(b: &mut String, node: u16) {
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-list\" id=\"session-list-section\"><h2 id=\"h-list\">Sessions one by one</h2>\
         <p class=\"sub\">{} As of the workers' last count (once a second); \
         heartbeat: time since the bot's last heartbeat.</p>{}\
         <nav class=\"pager\" aria-label=\"Session pages\"><button type=\"button\" id=\"sessions-prev\" disabled>Previous</button>\
         <span id=\"sessions-range\" role=\"status\">–</span>\
         <button type=\"button\" id=\"sessions-next\" disabled>Next</button></nav>\
         <p id=\"sessions-unlisted\" class=\"warn\" hidden></p>{}</section>",
        if node != 0 { "Every node's sessions of this application (each other node sends its first 1,000)." } else { "" },
        table(
            "session-list",
            "Sessions, by session id",
            &["Session", "Node", "Worker", "Shard", "Here since", "Heartbeat", "Send queue", "Compression", "Resumes"],
        ),
        table(
            "timeline",
            "The last 100 lifecycle events, newest first",
            &["When", "Event", "Code", "Session", "Node"],
        ),
    );
}

/// Sessions by node and shard, from every live node (node != 0).
fn cluster_section(b: &mut String, node: u16) {
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-cluster\" id=\"cluster\"><h2 id=\"h-cluster\">Across the cluster</h2>\
         <div class=\"stats\">{}{}{}{}{}{}</div>\
         <p id=\"cluster-silent\" class=\"warn\" role=\"status\" hidden></p>{}{}\
         <p class=\"sub\">This page is served by node {node}. Every other live node is asked for \
         this application's figures at most once a second, with {} ms to answer; a node that does \
         not answer in time is named above, never left out. <span id=\"cluster-age\"></span> \
         The sections below are this node's only: interaction latency quantiles and the \
         sessions chart cannot be added up across nodes, and identify budgets are the \
         registry's (the same on every node).</p></section>",
        stat("c-live", "Live, all nodes"),
        stat("c-degraded", "Degraded, all nodes"),
        stat("c-detached", "Detached, all nodes"),
        stat("c-nodes", "Nodes answering"),
        stat("c-identifies-hour", "Identifies, last hour"),
        stat("c-resumes-hour", "Resumes, last hour"),
        table(
            "by-node",
            "By node",
            &["Node", "Live", "Degraded", "Detached", "Identifies, last hour",
              "Resumes, last hour", "Answer"]
        ),
        table(
            "by-node-shard",
            "Sessions by node and shard",
            &["Node", "Shard", "Live", "Degraded"]
        ),
        super::cluster::LINK_DEADLINE.as_millis(),
    );
}

fn channel_options(installs: &[installs::Install]) -> String {
    let mut o = String::new();
    for i in installs {
        for (id, name, _) in &i.channels {
            let _ = write!(
                o,
                "<option value=\"{id}\">{} › #{}</option>",
                esc(&i.name),
                esc(name)
            );
        }
    }
    o
}

/// The application's public key and interactions endpoint, with a form
/// that verifies a URL (signed PING, bad signature refused) and saves it
/// only if both checks pass.
fn settings_section(b: &mut String, ctx: &Ctx, app: &registry::Application) {
    let reg = ctx.registry();
    let key = reg
        .signing_seed(app.id)
        .map(|seed| crate::egress::sign::public_key_hex(&seed))
        .unwrap_or_else(|_| "(the registry did not answer: reload)".into());
    let endpoint = match reg.interactions_endpoint(app.id) {
        Ok(Some(u)) => esc(&u),
        Ok(None) => "none: interactions reach the bot over the gateway (INTERACTION_CREATE)".into(),
        Err(_) => "(the registry did not answer: reload)".into(),
    };
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-settings\"><h2 id=\"h-settings\">Settings</h2>\
         <p>Public key (<code>verify_key</code>: an endpoint checks each request's \
         <code>X-Signature-Ed25519</code> with it): <code id=\"verify-key\">{}</code></p>\
         <p>Interactions endpoint URL: <code id=\"endpoint-url\">{endpoint}</code></p>\
         <form id=\"endpoint\" class=\"tool\" data-api=\"/api/endpoint\"><h3>Set the interactions endpoint</h3>\
         <p>Saved only if it answers a signed PING with <code>{{\"type\":1}}</code> and refuses the same \
         PING with a bad signature (401), as the platform requires.</p>\
         <label for=\"ep-url\">URL (empty: remove it; interactions then come over the gateway)</label>\
         <input id=\"ep-url\" name=\"url\" type=\"url\">\
         <button type=\"submit\">Verify and save</button><output id=\"endpoint-result\" role=\"status\"></output></form>",
        esc(&key),
    );
    super::intents::settings(b, app);
    b.push_str("</section>");
}

/// Servers whose own commands the page lists (one registry read each).
const COMMAND_SERVERS: usize = 10;

/// The application's commands, global and per server (the first
/// `COMMAND_SERVERS` installations), with how to register them.
fn commands_section(
    b: &mut String,
    ctx: &Ctx,
    app: &registry::Application,
    global: &[registry::Command],
    installs: &[installs::Install],
) {
    let mut rows = String::new();
    let mut row = |scope: &str, c: &registry::Command| {
        let kind = match c.kind {
            1 => "slash",
            2 => "user",
            3 => "message",
            _ => "other",
        };
        let _ = write!(
            rows,
            "<tr><td data-label=\"Command\"><code>/{}</code></td><td data-label=\"Scope\">{}</td>\
             <td data-label=\"Type\">{kind}</td><td data-label=\"Description\">{}</td></tr>",
            esc(&c.name),
            esc(scope),
            esc(&c.description)
        );
    };
    for c in global {
        row("global", c);
    }
    for i in installs.iter().take(COMMAND_SERVERS) {
        for c in ctx
            .registry()
            .commands(app.id, Some(i.server_id))
            .unwrap_or_default()
        {
            row(&format!("server {}", i.name), &c);
        }
    }
    if rows.is_empty() {
        rows.push_str("<tr><td colspan=\"4\">none registered</td></tr>");
    }
    let base = ctx
        .v
        .shared
        .gateway_url
        .replacen("wss://", "https://", 1)
        .replacen("ws://", "http://", 1);
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-commands\"><h2 id=\"h-commands\">Commands</h2>\
         <table id=\"commands\"><caption>Registered commands (global, and those of the first \
         {COMMAND_SERVERS} servers)</caption><thead><tr><th scope=\"col\">Command</th>\
         <th scope=\"col\">Scope</th><th scope=\"col\">Type</th><th scope=\"col\">Description</th>\
         </tr></thead><tbody>{rows}</tbody></table>\
         <p>Register them as on Discord, with the bot's token: every library's command sync \
         does this. The whole global set at once (it replaces the set):</p>\
         <pre id=\"commands-hint\"><code>PUT {}/api/v10/applications/{}/commands\n\
         Authorization: Bot &lt;token&gt;\n\
         [{{\"name\": \"ping\", \"description\": \"Ping\", \"type\": 1}}]</code></pre>\
         <p>One server's own: <code>/api/v10/applications/{}/guilds/&lt;server id&gt;/commands</code>. \
         A new global set reaches every server at once (no hour's wait).</p></section>",
        esc(&base),
        app.id,
        app.id
    );
}

/// The install link Discord's OAuth2 URL generator makes, from checked
/// permissions (portal.js computes the number), and the operator's line:
/// this platform has no OAuth2 server for a server's owner to consent on.
fn install_link_section(b: &mut String, app: &registry::Application) {
    let boxes: String = names::PERMISSIONS
        .iter()
        .map(|(bit, name)| {
            let checked = if proto::permissions::EVERYONE_DEFAULT & (1u64 << bit) != 0 {
                " checked"
            } else {
                ""
            };
            format!(
                "<label class=\"perm\"><input type=\"checkbox\" value=\"{bit}\"{checked}> {name}</label>"
            )
        })
        .collect();
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-install\"><h2 id=\"h-install\">Install link</h2>\
         <fieldset id=\"install-perms\" data-app=\"{}\"><legend>Permissions the bot asks for</legend>{boxes}</fieldset>\
         <p>Permissions: <output id=\"install-bits\">{}</output></p>\
         <p>The link Discord's URL generator makes: <code id=\"install-link\"></code></p>\
         <p>This platform has no OAuth2 consent page for a server's owner to follow it to: \
         an operator installs the bot in a server with this line (the server id from them):</p>\
         <pre><code id=\"install-cli\"></code></pre></section>",
        app.id,
        proto::permissions::EVERYONE_DEFAULT,
    );
}

fn tools_section(b: &mut String, installs: &[installs::Install], commands: &[registry::Command]) {
    let channels = channel_options(installs);
    let cmds: String = commands
        .iter()
        .map(|c| format!("<option value=\"{0}\">/{0}</option>", esc(&c.name)))
        .collect();
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-tools\"><h2 id=\"h-tools\">Test your bot</h2>\
         <form id=\"test-message\" class=\"tool\" data-api=\"/api/test-message\"><h3>Send a test message</h3>\
         <label for=\"tm-channel\">Channel</label><select id=\"tm-channel\" name=\"channel\">{channels}</select>\
         <label for=\"tm-content\">Content</label><input id=\"tm-content\" name=\"content\" maxlength=\"2000\" value=\"hello from the portal\">\
         <button type=\"submit\">Send MESSAGE_CREATE</button><output id=\"test-message-result\" role=\"status\"></output></form>\
         <form id=\"click\" class=\"tool\" data-api=\"/api/click\"><h3>Use a slash command</h3>\
         <label for=\"ck-command\">Command</label><select id=\"ck-command\" name=\"command\">{cmds}</select>\
         <label for=\"ck-channel\">Channel</label><select id=\"ck-channel\" name=\"channel\">{channels}</select>\
         <button type=\"submit\">Click</button><output id=\"click-result\" role=\"status\"></output></form>\
         <form id=\"verify\" class=\"tool\" data-api=\"/api/verify-endpoint\"><h3>Re-check the interactions endpoint</h3>\
         <label for=\"vf-url\">URL (empty: the one set)</label><input id=\"vf-url\" name=\"url\" type=\"url\">\
         <button type=\"submit\">Check</button><output id=\"verify-result\" role=\"status\"></output></form>\
         <form id=\"reset\" class=\"tool\" data-api=\"/api/reset-token\" data-confirm=\"Reset the token? The bot's sessions close with 4004.\">\
         <h3>Reset the token</h3><p>The new token is shown once. Live sessions close with 4004.</p>\
         <button type=\"submit\" class=\"danger\">Reset token</button><output id=\"reset-result\" role=\"status\"></output></form>\
         </section>"
    );
}

fn installs_section(
    b: &mut String,
    app: &registry::Application,
    installs: &[installs::Install],
    total: usize,
) {
    let intents: Vec<&str> = names::PRIVILEGED_INTENTS
        .iter()
        .filter(|(bit, _)| app.approved_intents & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    let intents = if intents.is_empty() {
        "none".to_string()
    } else {
        intents.join(", ")
    };
    let _ = write!(
        b,
        "<section aria-labelledby=\"h-inst\"><h2 id=\"h-inst\">Installations</h2>\
         <p>Approved privileged intents: <strong id=\"intents\">{intents}</strong></p>\
         <p>Installed in {total} server(s){}.</p>\
         <table id=\"installs\"><caption>Servers</caption><thead><tr><th scope=\"col\">Server</th>\
         <th scope=\"col\">Granted permissions</th><th scope=\"col\">Channels the bot sees</th></tr></thead><tbody>",
        if total > installs.len() {
            format!(" (the first {} shown)", installs.len())
        } else {
            String::new()
        }
    );
    for i in installs {
        let perms = names::permissions(i.granted).join(", ");
        let chans: Vec<String> = i
            .channels
            .iter()
            .map(|c| format!("#{}", esc(&c.1)))
            .collect();
        let _ = write!(
            b,
            "<tr><td class=\"server-name\" data-label=\"Server\">{} <code>{}</code></td>\
             <td data-label=\"Granted permissions\">{} <code>({})</code></td>\
             <td data-label=\"Channels the bot sees\">{}</td></tr>",
            esc(&i.name),
            i.server_id,
            esc(&perms),
            i.granted,
            chans.join(", ")
        );
    }
    b.push_str("</tbody></table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        let page = signin("pre", Some("<b>no</b>"));
        assert!(page.contains("&lt;b&gt;no&lt;/b&gt;") && !page.contains("<b>no"));
    }
}
