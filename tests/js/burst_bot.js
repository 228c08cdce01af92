// An unmodified discord.js 14 bot that bursts concurrent sends through a
// gatewayd node's REST edge, with the real rate limits on (5 sends per 5 s
// per channel, 50 requests per second per bot).
//
// The only change from a bot written for Discord is the REST base URL
// (`rest: { api }`); the gateway URL comes from GET /gateway/bot. Once
// ready it sends `--per` messages to each channel of `--channels` ALL AT
// ONCE (every `channel.send` started before any answer): @discordjs/rest
// must pace them from the rate-limit headers alone (a queue per bucket hash
// and channel, and its own count of the 50 per second), so no request of it
// may ever get a 429. It then waits until every message the REST answers
// named came back over its own gateway session as MESSAGE_CREATE, and a
// second more for a late duplicate.
//
// What counts as a 429, in discord.js's own reporting: a `response` event
// (the REST manager's, for every response) with status 429, and its debug
// line "Encountered unexpected 429 rate limit". Its `rateLimited` event is
// NOT a 429: @discordjs/rest emits it each time it holds a request back
// because the headers said the bucket is spent (the pacing this test
// wants); the summary counts those as `paced`.
//
// Delivery is counted twice: the `raw` gateway packets (every
// MESSAGE_CREATE dispatch as received) and `messageCreate` (what the
// library made of them; for its own messages it emits a duplicate too).
//
// Usage (run by tests/rest_bursts.rs; NODE_PATH is the node_modules
// scripts/test-all.sh installs from tests/js/package-lock.json):
//
//   GATEWAYD_TOKEN=... node burst_bot.js --addr HOST:PORT --channels ID,ID --per N
//
// Prints `READY` once ready, and a JSON summary as the last stdout line;
// exit status 0 when every send succeeded, no 429 was seen and every sent
// message was seen exactly once.

"use strict";

const { Client, GatewayIntentBits, Events } = require("discord.js");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const addr = arg("addr");
const channels = arg("channels", "").split(",").filter((c) => c);
const per = Number(arg("per", "1"));
const timeoutS = Number(arg("timeout", "90"));
const started = Date.now();

const summary = {
  ok: false,
  errors: [],
  sent: [],
  send_failures: [],
  created: [],
  raw_created: [],
  statuses: {},
  responses_429: [],
  debug_429: [],
  paced: 0,
  paced_global: 0,
};
let burstDone = false;
let finished = false;

function fail(what, e) {
  summary.errors.push(`${what}: ${e && e.stack ? e.stack : e}`);
}

function counts(ids) {
  const m = new Map();
  for (const id of ids) m.set(id, (m.get(id) || 0) + 1);
  return m;
}

function allSeen() {
  const raw = new Set(summary.raw_created);
  const made = new Set(summary.created);
  return burstDone && summary.sent.every((s) => raw.has(s.id) && made.has(s.id));
}

function finish() {
  if (finished) return;
  finished = true;
  const raw = counts(summary.raw_created);
  const made = counts(summary.created);
  summary.missing = summary.sent.map((s) => s.id).filter((id) => !raw.get(id) || !made.get(id));
  summary.duplicated = [...new Set([...raw].concat([...made]).filter(([, n]) => n > 1).map(([id]) => id))];
  summary.elapsed_s = (Date.now() - started) / 1000;
  summary.discord_js = require("discord.js").version;
  summary.ok =
    summary.errors.length === 0 &&
    summary.send_failures.length === 0 &&
    summary.sent.length === channels.length * per &&
    summary.missing.length === 0 &&
    summary.duplicated.length === 0 &&
    summary.responses_429.length === 0 &&
    summary.debug_429.length === 0 &&
    !summary.statuses["429"];
  console.log(JSON.stringify(summary));
  process.exit(summary.ok ? 0 : 1);
}

const client = new Client({
  intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.MessageContent],
  rest: { api: `http://${addr}/api` },
});

async function burst() {
  const targets = [];
  for (const id of channels) {
    const channel = client.channels.cache.get(id);
    if (!channel) throw new Error(`channel ${id} is not in discord.js's cache (GUILD_CREATE?)`);
    for (let i = 0; i < per; i++) targets.push([channel, i]);
  }
  const t0 = Date.now();
  console.error(`${stamp()} burst starts`);
  // When each answer came (s after the burst began): how the library paced.
  const at = targets.map(() => null);
  const results = await Promise.allSettled(
    targets.map(([ch, i], k) =>
      ch.send(`burst ${ch.id} ${i}`).then((m) => {
        at[k] = (Date.now() - t0) / 1000;
        return m;
      }),
    ),
  );
  summary.burst_s = (Date.now() - t0) / 1000;
  results.forEach((r, k) => {
    const [ch, i] = targets[k];
    if (r.status === "fulfilled") {
      summary.sent.push({ id: r.value.id, channel: ch.id, content: r.value.content, at_s: at[k] });
    } else {
      summary.send_failures.push(`${ch.id} ${i}: ${r.reason && r.reason.stack ? r.reason.stack : r.reason}`);
    }
  });
}

client.once(Events.ClientReady, () => {
  console.log("READY");
  console.error(`${stamp()} ready`);
  burst()
    .catch((e) => fail("burst", e))
    .finally(() => {
      burstDone = true;
      const poll = setInterval(() => {
        if (allSeen()) {
          clearInterval(poll);
          // A duplicate MESSAGE_CREATE would come right behind the original.
          setTimeout(finish, 1000);
        }
      }, 50);
    });
});

client.on("raw", (packet) => {
  if (packet.t === "MESSAGE_CREATE" && client.user && packet.d.author && packet.d.author.id === client.user.id) {
    summary.raw_created.push(packet.d.id);
  }
});
client.on(Events.MessageCreate, (m) => {
  if (m.author.id === client.user.id) summary.created.push(m.id);
});
client.on(Events.Error, (e) => fail("client error", e));

// The REST manager's own reporting: every response, every wait it chose,
// each on stderr with its time (ms since the start, and Unix ms) as a
// timeline the test prints on failure.
const stamp = () => `+${Date.now() - started}ms @${Date.now()}`;
client.rest.on("response", (req, res) => {
  summary.statuses[res.status] = (summary.statuses[res.status] || 0) + 1;
  const h = (k) => res.headers.get(k);
  console.error(
    `${stamp()} REST ${req.method} ${req.path} ${res.status} bucket=${h("x-ratelimit-bucket")} ` +
      `remaining=${h("x-ratelimit-remaining")} reset_after=${h("x-ratelimit-reset-after")} scope=${h("x-ratelimit-scope")}`,
  );
  if (res.status === 429) {
    const seen = `${stamp()} ${req.method} ${req.path}: ${JSON.stringify(Object.fromEntries(res.headers))}`;
    res.text().then(
      (body) => summary.responses_429.push(`${seen} body ${body}`),
      () => summary.responses_429.push(seen),
    );
  }
});
client.rest.on("restDebug", (msg) => {
  // Not any "429": message and channel ids may hold those digits.
  if (msg.includes("Encountered unexpected 429")) summary.debug_429.push(`${stamp()} ${msg}`);
});
client.rest.on("rateLimited", (info) => {
  summary.paced += 1;
  if (info.global) summary.paced_global += 1;
  console.error(`${stamp()} paced: ${JSON.stringify(info)}`);
});

process.on("unhandledRejection", (e) => fail("unhandled rejection", e));
setTimeout(() => {
  summary.timeout_s = timeoutS;
  fail("timeout", `after ${timeoutS} s`);
  finish();
}, timeoutS * 1000);
client.login(process.env.GATEWAYD_TOKEN).catch((e) => {
  fail("login", e);
  finish();
});
