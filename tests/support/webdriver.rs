//! A tiny blocking W3C WebDriver client: chromedriver (Debian's
//! chromium-driver) driving headless chromium over its JSON HTTP API, no
//! async runtime. Only what the portal's browser tests use: open a page,
//! find by CSS, type, click, read text, run a script, take a screenshot.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The W3C name of an element reference in answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where the browser and its driver are (env overrides, else Debian's paths);
/// None when either is missing.
pub fn binaries() -> Option<(String, String)> {
    let driver =
        std::env::var("GATEWAYD_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    let browser = std::env::var("GATEWAYD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    (std::path::Path::new(&driver).exists() && std::path::Path::new(&browser).exists())
        .then_some((driver, browser))
}

/// A chromedriver child with one browser session; both end on drop.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    // Read the head, then exactly Content-Length bytes (chromedriver may
    // keep the connection open).
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let (head_end, length) = loop {
        let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("chromedriver closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (i + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf[..head_end - 4]).to_string();
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    let (head, body) = (head.as_str(), body.as_str());
    let v: Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body:.300}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{method} {path}: {head:.40} {v:.600}"));
    }
    Ok(v["value"].clone())
}

impl Browser {
    /// Starts chromedriver on a free port and a headless browser session.
    pub fn start() -> Browser {
        let (driver_bin, browser_bin) = binaries().expect(
            "needs chromium and chromedriver: apt-get install chromium chromium-driver \
             (scripts/test-all.sh does), or set GATEWAYD_CHROMIUM and GATEWAYD_CHROMEDRIVER",
        );
        let port = super::node::free_port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while call(addr, "GET", "/status", None).map(|v| v["ready"] == true) != Ok(true) {
            assert!(Instant::now() < deadline, "chromedriver not ready in 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": browser_bin, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,2400", "--no-first-run", "--disable-extensions"]}
        }}});
        let v = call(addr, "POST", "/session", Some(&caps)).expect("a browser session");
        let session = v["sessionId"].as_str().expect("sessionId").to_string();
        Browser {
            driver,
            addr,
            session,
        }
    }

    fn cmd(&self, method: &str, tail: &str, body: Option<&Value>) -> Result<Value, String> {
        call(
            self.addr,
            method,
            &format!("/session/{}{tail}", self.session),
            body,
        )
    }

    /// Resize the window (CSS pixels), e.g. to a phone's 375 px.
    pub fn set_window(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(&json!({"width": width, "height": height})),
        )
        .expect("resize the window");
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(&json!({"url": url})))
            .expect("navigate");
    }

    /// The element matching `css`, if there is one now.
    pub fn find(&self, css: &str) -> Option<String> {
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(&json!({"using": "css selector", "value": css})),
            )
            .ok()?;
        v[ELEMENT].as_str().map(str::to_string)
    }

    /// Waits up to `limit` for `css` to exist.
    pub fn wait_for(&self, css: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = self.find(css) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "no element {css} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn text(&self, css: &str) -> String {
        let e = self.wait_for(css, Duration::from_secs(10));
        self.cmd("GET", &format!("/element/{e}/text"), None)
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }

    /// Waits until `css`'s text satisfies `f`; the text seen last.
    pub fn wait_text(
        &self,
        css: &str,
        limit: Duration,
        f: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + limit;
        loop {
            let t = self.text(css);
            if f(&t) {
                return Ok(t);
            }
            if Instant::now() > deadline {
                return Err(t);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.wait_for(css, Duration::from_secs(10));
        self.cmd(
            "POST",
            &format!("/element/{e}/value"),
            Some(&json!({"text": text})),
        )
        .expect("send keys");
    }

    pub fn click(&self, css: &str) {
        let e = self.wait_for(css, Duration::from_secs(10));
        self.cmd("POST", &format!("/element/{e}/click"), Some(&json!({})))
            .expect("click");
    }

    /// Runs `script` (a function body) in the page; its return value.
    pub fn run(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(&json!({"script": script, "args": []})),
        )
        .expect("execute")
    }

    pub fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }

    /// A PNG of the viewport, written to `path`.
    pub fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine;
        let v = self.cmd("GET", "/screenshot", None).expect("screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("base64 PNG");
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.cmd("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
