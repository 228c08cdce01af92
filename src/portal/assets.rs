//! The portal's static files, compiled into the binary: the style sheet,
//! the script and the icon. Each is served at a name carrying a hash of its
//! bytes (`/static/portal.3f2a….css`), cached by browsers for a year
//! (`immutable`: a new build's page names new files), and gzip-compressed
//! once at start for a client that accepts it. The plain names
//! (`/static/portal.css`, `/favicon.ico`) still answer, revalidated on each
//! use (`no-cache`), for what links to them directly.

use std::sync::OnceLock;

use super::http::Response;

pub struct Asset {
    /// `/static/<stem>.<hash>.<ext>`
    pub path: String,
    plain: &'static str,
    ctype: &'static str,
    bytes: &'static [u8],
    gzip: Vec<u8>,
}

const FILES: [(&str, &str, &str, &[u8]); 3] = [
    (
        "portal",
        "css",
        "text/css; charset=utf-8",
        include_bytes!("assets/portal.css"),
    ),
    (
        "portal",
        "js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/portal.js"),
    ),
    (
        "favicon",
        "svg",
        "image/svg+xml",
        include_bytes!("assets/favicon.svg"),
    ),
];

/// The three assets, made once.
pub fn all() -> &'static [Asset; 3] {
    static ALL: OnceLock<[Asset; 3]> = OnceLock::new();
    ALL.get_or_init(|| FILES.map(|(stem, ext, ctype, bytes)| make(stem, ext, ctype, bytes)))
}

pub fn css() -> &'static Asset {
    &all()[0]
}
pub fn js() -> &'static Asset {
    &all()[1]
}
pub fn icon() -> &'static Asset {
    &all()[2]
}

fn make(stem: &'static str, ext: &'static str, ctype: &'static str, bytes: &'static [u8]) -> Asset {
    // FNV-1a, 64 bits: names a version of the file, nothing to defend.
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let plain = match (stem, ext) {
        ("favicon", _) => "/favicon.ico",
        ("portal", "css") => "/static/portal.css",
        _ => "/static/portal.js",
    };
    Asset {
        path: format!("/static/{stem}.{hash:016x}.{ext}"),
        plain,
        ctype,
        bytes,
        gzip: gzip(bytes),
    }
}

fn gzip(input: &[u8]) -> Vec<u8> {
    let config = zlib_rs::DeflateConfig {
        level: 9,
        method: zlib_rs::Method::Deflated,
        window_bits: 16 + 15, // a gzip wrapper
        mem_level: 8,
        strategy: zlib_rs::Strategy::Default,
    };
    let mut out = vec![0u8; zlib_rs::compress_bound(input.len()) + 64];
    let (done, rc) = zlib_rs::compress_slice(&mut out, input, config);
    assert_eq!(rc, zlib_rs::ReturnCode::Ok, "gzip of a static file");
    let n = done.len();
    out.truncate(n);
    out
}

/// The asset at `path` (its hashed name or its plain one), if any, as
/// the answer to a client that accepts gzip or not.
pub fn serve(path: &str, accepts_gzip: bool) -> Option<Response> {
    let a = all().iter().find(|a| a.path == path || a.plain == path)?;
    let hashed = a.path == path;
    let body = if accepts_gzip { &a.gzip[..] } else { a.bytes };
    let mut r = Response::new(200, a.ctype, body);
    r.cache = if hashed {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    r.gzip = accepts_gzip;
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_asset_has_a_hashed_name_and_a_gzip_that_inflates_to_it() {
        for a in all() {
            assert!(
                a.path.starts_with("/static/") && a.path.len() > 20,
                "{}",
                a.path
            );
            let mut out = vec![0u8; a.bytes.len() + 64];
            let mut inf = zlib_rs::Inflate::new(true, 16 + 15);
            inf.decompress(&a.gzip, &mut out, zlib_rs::InflateFlush::Finish)
                .unwrap();
            assert_eq!(&out[..inf.total_out() as usize], a.bytes, "{}", a.path);
            assert!(a.gzip.len() < a.bytes.len(), "{} compresses", a.path);
        }
        assert_ne!(css().path, js().path);
    }
}
