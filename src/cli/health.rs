//! `switchyard health`: asks a running gateway's `/health` (or `/ready`) and exits 0
//! on HTTP 200, 1 otherwise.
//!
//! Why a subcommand: the container image's `HEALTHCHECK` and a Kubernetes `exec`
//! probe need a client inside the image, and the runtime image carries no `curl`.
//! Plain HTTP/1.1 over TCP with one deadline for the whole exchange, which is all a
//! probe of a local listener needs (no TLS, no proxies, no redirects).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `switchyard health` flags.
#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// The URL to ask: `http://HOST:PORT/PATH`.
    #[arg(long, default_value = "http://127.0.0.1:8080/health")]
    pub url: String,
    /// Deadline of the whole check (connect, send, read), in ms.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
}

/// Runs the check: exit 0 when the answer is HTTP 200; 1 with a one-line reason on
/// stderr otherwise (refused, timed out, another status); 2 for a URL it cannot use.
pub fn run(args: &HealthArgs) -> ExitCode {
    let (host, port, path) = match parse_url(&args.url) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: --url {}: {e}", args.url);
            return ExitCode::from(2);
        }
    };
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms.max(1));
    match check(&host, port, &path, deadline) {
        Ok(200) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("unhealthy: {} answered HTTP {status}", args.url);
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("unhealthy: {}: {e}", args.url);
            ExitCode::from(1)
        }
    }
}

/// `http://host[:port][/path]` → (host, port, path); the port defaults to 80.
fn parse_url(url: &str) -> Result<(String, u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported (a probe of a local listener)")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err("no host".into());
    }
    let port_of = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("`{p}` is not a port (1-65535)"))
    };
    // An IPv6 literal is bracketed (RFC 3986 §3.2.2): `[::1]` or `[::1]:8080`.
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or("an IPv6 address needs its closing `]`, as in http://[::1]:8080/health")?;
        let port = match after {
            "" => 80,
            _ => port_of(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| format!("`{after}` after `]` is not `:PORT`"))?,
            )?,
        };
        (h, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err(
                    "an IPv6 address is written in brackets, as in http://[::1]:8080/health".into(),
                )
            }
            Some((h, p)) => (h, port_of(p)?),
            None => (authority, 80),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if port == 0 {
        return Err("port 0 is not a port to ask".into());
    }
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("the path has spaces or control characters".into());
    }
    Ok((host.to_string(), port, path.to_string()))
}

/// One GET; the status code of the answer.
fn check(host: &str, port: u16, path: &str, deadline: Instant) -> Result<u16, String> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| "no answer within the deadline".to_string())
    };
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, left()?).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {authority}\r\nuser-agent: switchyard-health\r\nconnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    // The status line is all that is read (at most 1 KiB).
    let mut head = Vec::with_capacity(128);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 1024 {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("no answer within the deadline".into())
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let line = line.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok(code),
        _ => Err(format!(
            "not an HTTP answer: {:?}",
            line.chars().take(60).collect::<String>()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_host_port_and_path() {
        assert_eq!(
            parse_url("http://127.0.0.1:8080/health").unwrap(),
            ("127.0.0.1".into(), 8080, "/health".into())
        );
        assert_eq!(
            parse_url("http://gw").unwrap(),
            ("gw".into(), 80, "/".into())
        );
        assert_eq!(
            parse_url("http://[::1]:9/ready").unwrap(),
            ("::1".into(), 9, "/ready".into())
        );
        assert!(parse_url("https://x/health").is_err());
        assert!(parse_url("http://x:99999/").is_err());
        assert!(parse_url("http://x:0/").is_err());
        assert!(parse_url("http:///health").is_err());
        assert!(parse_url("http://x/a b").is_err());
        // Found by the operator attack of 2026-12-07: an unclosed IPv6 literal was
        // read as host ":" and port 1, so the probe said "unhealthy" (exit 1) where
        // a URL it cannot use is exit 2.
        for bad in [
            "http://[::1",
            "http://[::1]x/",
            "http://::1:80/",
            "http://[]:80/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_url("http://[::1]/").unwrap(),
            ("::1".to_string(), 80, "/".to_string())
        );
    }

    #[test]
    fn a_refused_port_is_unhealthy_not_a_hang() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let deadline = Instant::now() + Duration::from_millis(2000);
        assert!(check("127.0.0.1", port, "/health", deadline).is_err());
    }

    #[test]
    fn a_listener_that_never_answers_times_out() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_millis(200);
        let e = check("127.0.0.1", port, "/health", deadline).unwrap_err();
        assert!(e.contains("deadline"), "{e}");
        drop(l);
    }
}
