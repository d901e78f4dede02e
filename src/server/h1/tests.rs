//! The HTTP/1.1 server side: head parsing and framing rules, the chunked decoder
//! over every split of its input, response heads, and whole connections over
//! loopback sockets.

use super::*;
use crate::server::edge_io::Activity;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn parse(bytes: &[u8]) -> Result<Option<Head>, HeadError> {
    parse_head(&Bytes::copy_from_slice(bytes), &ConnLimits::default())
}

fn head(bytes: &[u8]) -> Head {
    parse(bytes).unwrap().expect("a complete head")
}

fn refused(bytes: &[u8]) -> u16 {
    parse(bytes).expect_err("refused").status
}

#[test]
fn a_head_is_parsed_with_its_fields_as_slices_of_the_read() {
    let raw = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nX-Key: v\r\nx-key: w\r\nContent-Length: 5\r\n\r\nhello";
    let h = head(raw);
    assert_eq!(h.len, raw.len() - 5);
    assert_eq!(h.parts.method, Method::POST);
    assert_eq!(h.parts.uri.path(), "/v1/chat/completions");
    assert_eq!(h.parts.uri.query(), Some("x=1"));
    assert_eq!(h.parts.version, Version::HTTP_11);
    let keys: Vec<_> = h.parts.headers.get_all("x-key").iter().collect();
    assert_eq!(keys, ["v", "w"]);
    assert_eq!(h.framing, Decode::Length(5));
    assert!(h.keep_alive);
    assert!(!h.expects_continue);
}

#[test]
fn a_partial_head_waits_for_more() {
    assert!(parse(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
    assert!(parse(b"GET / HT").unwrap().is_none());
    // Empty lines before the request line are skipped (RFC 9112 §2.2).
    assert!(parse(b"\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap()
        .is_some());
}

#[test]
fn ambiguous_framing_is_refused() {
    // RFC 9112 §6.3 and §11.2: a request a proxy could frame two ways.
    for raw in [
        &b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 5, 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: +5\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 0x10\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: \r\n\r\n",
    ] {
        assert_eq!(refused(raw), 400, "{}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn framing_follows_the_last_coding_and_equal_lengths() {
    let h = head(b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: Chunked\r\n\r\n");
    assert!(matches!(h.framing, Decode::Chunked(_)));
    let h =
        head(b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n");
    assert_eq!(h.framing, Decode::Length(7));
    let h = head(b"POST / HTTP/1.1\r\nhost: x\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.framing, Decode::Done);
    let h = head(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    assert_eq!(h.framing, Decode::Done);
}

#[test]
fn persistence_follows_the_version_and_connection_tokens() {
    assert!(head(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").keep_alive);
    assert!(!head(b"GET / HTTP/1.1\r\nhost: x\r\nConnection: Close\r\n\r\n").keep_alive);
    assert!(!head(b"GET / HTTP/1.1\r\nhost: x\r\nConnection: upgrade, close\r\n\r\n").keep_alive);
    assert!(!head(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
}

#[test]
fn continue_is_expected_only_for_a_body_on_http_1_1() {
    let h =
        head(b"POST / HTTP/1.1\r\nhost: x\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n");
    assert!(h.expects_continue);
    let h = head(b"POST / HTTP/1.1\r\nhost: x\r\nExpect: 100-continue\r\n\r\n");
    assert!(!h.expects_continue, "no body");
    let h = head(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    assert!(!h.expects_continue, "HTTP/1.0");
}

/// Found by attack (2026-12-05): `GET health` and `GET x:80` were read as
/// authority-form targets and answered 404 (`unknown path GET `) on a kept
/// connection; RFC 9112 section 3.2 allows that form for CONNECT only.
#[test]
fn a_request_target_in_a_form_its_method_may_not_use_is_a_400() {
    for raw in [
        &b"GET health HTTP/1.1\r\nhost: x\r\n\r\n"[..],
        b"GET x:80 HTTP/1.1\r\nhost: x\r\n\r\n",
        b"POST v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n",
        b"GET * HTTP/1.1\r\nhost: x\r\n\r\n",
    ] {
        let e = parse(raw).expect_err("refused");
        assert_eq!(e.status, 400, "{}", String::from_utf8_lossy(raw));
    }
    for raw in [
        &b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"[..],
        b"GET http://x/health HTTP/1.1\r\nhost: x\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n",
        b"CONNECT x:443 HTTP/1.1\r\nhost: x:443\r\n\r\n",
    ] {
        head(raw);
    }
}

#[test]
fn malformed_or_oversized_heads_get_their_status() {
    assert_eq!(refused(b"GARBAGE\r\n\r\n"), 400);
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n"),
        400
    );
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nhost: x\r\nBad Name: x\r\n\r\n"),
        400
    );
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nhost: x\r\nx: a\0b\r\n\r\n"),
        400
    );
    assert_eq!(refused(b"GET / HTTP/2.0\r\n\r\n"), 400);
    let mut many = b"GET / HTTP/1.1\r\nhost: x\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(refused(&many), 431);
    let long_uri = format!(
        "GET /{} HTTP/1.1\r\nhost: x\r\n\r\n",
        "a".repeat(canned::MAX_URI_BYTES)
    );
    assert_eq!(refused(long_uri.as_bytes()), 414);
    let limits = ConnLimits::default();
    // A head past the cap: 414 while the request line has not ended, else 431.
    let endless_line = vec![b'a'; head_cap(&limits) + 1];
    let mut line = b"GET /".to_vec();
    line.extend_from_slice(&endless_line);
    assert_eq!(refused(&line), 414);
    let mut fields = b"GET / HTTP/1.1\r\nhost: x\r\nx: ".to_vec();
    fields.extend_from_slice(&endless_line);
    assert_eq!(refused(&fields), 431);
}

/// `body` chunked into `sizes`, with an extension and a trailer.
fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let n = n.min(body.len() - at);
        if i % 2 == 0 {
            out.extend_from_slice(format!("{n:X}\r\n").as_bytes());
        } else {
            out.extend_from_slice(format!("{n:x};name=\"v\"\r\n").as_bytes());
        }
        out.extend_from_slice(&body[at..at + n]);
        out.extend_from_slice(b"\r\n");
        at += n;
    }
    assert_eq!(at, body.len());
    out.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    out
}

/// Decodes `wire` fed in pieces ending at each of `cuts`; the body and the bytes
/// left after it.
fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut d = Decode::Chunked(Chunk::Size {
        size: 0,
        digits: 0,
        line: 0,
    });
    let mut body = Vec::new();
    let mut buf = Bytes::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&wire.len())) {
        let mut joined = buf.to_vec();
        joined.extend_from_slice(&wire[fed..cut]);
        buf = Bytes::from(joined);
        fed = cut;
        while !buf.is_empty() && !d.is_done() {
            if let Some(data) = d.next(&mut buf)? {
                body.extend_from_slice(&data);
            }
        }
    }
    assert!(d.is_done(), "the body ended");
    Ok((body, buf.to_vec()))
}

#[test]
fn chunked_bodies_decode_alike_however_the_bytes_arrive() {
    let body: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
    let mut wire = chunked(&body, &[1, 16, 200, 83]);
    wire.extend_from_slice(b"GET /next HTTP/1.1\r\nhost: x\r\n\r\n");
    for cut in 0..wire.len() {
        let (got, rest) = decode_in_pieces(&wire, &[cut]).unwrap();
        assert_eq!(got, body, "split at {cut}");
        assert_eq!(
            rest, b"GET /next HTTP/1.1\r\nhost: x\r\n\r\n",
            "split at {cut}"
        );
    }
    let every: Vec<usize> = (1..wire.len()).collect();
    assert_eq!(decode_in_pieces(&wire, &every).unwrap().0, body);
}

#[test]
fn bad_chunked_framing_fails() {
    for wire in [
        &b"x\r\nabc\r\n0\r\n\r\n"[..],
        b"0x3\r\nabc\r\n0\r\n\r\n",
        b"3\nabc\r\n0\r\n\r\n",
        b"3\r\nabcd\r\n0\r\n\r\n",
        b"3\r\nabc\n0\r\n\r\n",
        b"10000000000000000\r\n",
        b"3;ext\nabc\r\n0\r\n\r\n",
        b"0\r\n\r\r",
    ] {
        let mut d = Decode::Chunked(Chunk::Size {
            size: 0,
            digits: 0,
            line: 0,
        });
        let mut buf = Bytes::copy_from_slice(wire);
        let failed = loop {
            match d.next(&mut buf) {
                Err(_) => break true,
                Ok(_) if d.is_done() || buf.is_empty() => break false,
                Ok(_) => {}
            }
        };
        assert!(failed, "{}", String::from_utf8_lossy(wire));
    }
    let mut d = Decode::Chunked(Chunk::Size {
        size: 0,
        digits: 0,
        line: 0,
    });
    let mut long_ext = b"1;".to_vec();
    long_ext.resize(MAX_CHUNK_LINE + 10, b'a');
    assert!(d.next(&mut Bytes::from(long_ext)).is_err());
}

#[test]
fn a_length_body_takes_its_bytes_and_leaves_the_next_request() {
    let mut d = Decode::Length(5);
    let mut buf = Bytes::from_static(b"hel");
    assert_eq!(d.next(&mut buf).unwrap().unwrap(), "hel");
    assert_eq!(d, Decode::Length(2));
    let mut buf = Bytes::from_static(b"loGET");
    assert_eq!(d.next(&mut buf).unwrap().unwrap(), "lo");
    assert!(d.is_done());
    assert_eq!(buf, "GET");
}

fn encoded(
    resp: Response<crate::body::Body>,
    method: Method,
    version: Version,
) -> (String, Framing, bool) {
    let mut keep = true;
    let (head, framing) = encode_head(&resp, &[], &method, version, &mut keep);
    (String::from_utf8(head).unwrap(), framing, keep)
}

#[test]
fn response_heads_frame_the_body_as_its_length_allows() {
    let json = || crate::body::json(http::StatusCode::OK, "{}");
    let (head, framing, keep) = encoded(json(), Method::POST, Version::HTTP_11);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\ncontent-length: 2\r\n"), "{head}");
    assert!(head.contains("\r\ndate: "), "{head}");
    assert!(
        head.ends_with("\r\n\r\n") && !head.contains("connection"),
        "{head}"
    );
    assert_eq!((framing, keep), (Framing::Length(2), true));

    let stream = || {
        let body =
            http_body_util::StreamBody::new(futures_util::stream::iter(vec![Ok::<_, BoxError>(
                Frame::data(Bytes::from_static(b"x")),
            )]));
        let mut r = Response::new(crate::body::Body::boxed(body));
        r.headers_mut().insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("identity"),
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        r
    };
    let (head, framing, keep) = encoded(stream(), Method::POST, Version::HTTP_11);
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(
        !head.contains("identity") && !head.contains("keep-alive"),
        "{head}"
    );
    assert_eq!((framing, keep), (Framing::Chunked, true));
    // An HTTP/1.0 client cannot read chunks: the end of the connection frames it.
    let (head, framing, keep) = encoded(stream(), Method::POST, Version::HTTP_10);
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert_eq!((framing, keep), (Framing::Close, false));
    // HTTP/1.0 with keep-alive asked for and a length: told it stays.
    let (head, _, keep) = encoded(json(), Method::GET, Version::HTTP_10);
    assert!(
        head.contains("\r\nconnection: keep-alive\r\n") && keep,
        "{head}"
    );

    let (head, framing, _) = encoded(json(), Method::HEAD, Version::HTTP_11);
    assert!(head.contains("\r\ncontent-length: 2\r\n"), "{head}");
    assert_eq!(framing, Framing::None);
    let mut no_content = json();
    *no_content.status_mut() = http::StatusCode::NO_CONTENT;
    let (head, framing, _) = encoded(no_content, Method::POST, Version::HTTP_11);
    assert!(!head.contains("content-length"), "{head}");
    assert_eq!(framing, Framing::None);
    let mut closing = json();
    closing
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    let (head, _, keep) = encoded(closing, Method::POST, Version::HTTP_11);
    assert!(
        head.contains("\r\nconnection: close\r\n") && !keep,
        "{head}"
    );
}

#[test]
fn chunk_size_lines_are_lowercase_hex() {
    let mut out = [0u8; 18];
    assert_eq!(chunk_line(0, &mut out), b"0\r\n");
    assert_eq!(chunk_line(255, &mut out), b"ff\r\n");
    assert_eq!(
        chunk_line(usize::MAX, &mut out),
        format!("{:x}\r\n", usize::MAX).as_bytes()
    );
}

/// A server of [`serve`] on one loopback connection, answering with `answer`; the
/// client's end.
async fn connection<F, Fut>(answer: F) -> TcpStream
where
    F: Fn(Request<crate::server::RequestBody>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<crate::body::Body>> + Send + 'static,
{
    connection_with(ConnLimits::default(), None, answer).await.0
}

/// [`connection`] held to `limits`, its client's receive buffer set to `recv_buf`
/// bytes if given; also the server's task, which ends with the connection.
async fn connection_with<F, Fut>(
    limits: ConnLimits,
    recv_buf: Option<u32>,
    answer: F,
) -> (TcpStream, tokio::task::JoinHandle<()>)
where
    F: Fn(Request<crate::server::RequestBody>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<crate::body::Body>> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(n) = recv_buf {
        socket.set_recv_buffer_size(n).unwrap();
    }
    let client = socket.connect(l.local_addr().unwrap()).await.unwrap();
    let (server, _) = l.accept().await.unwrap();
    let (tx, stopping) = tokio::sync::watch::channel(());
    (client, serve_on(server, limits, stopping, Some(tx), answer))
}

/// Serves `server` (sniffed first) with [`serve_answers`] in a task of its own, told
/// to stop by `stopping`; `hold` is kept alive with the task (a dropped sender is a
/// stop).
fn serve_on<F, Fut>(
    server: TcpStream,
    limits: ConnLimits,
    stopping: tokio::sync::watch::Receiver<()>,
    hold: Option<tokio::sync::watch::Sender<()>>,
    answer: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(Request<crate::server::RequestBody>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<crate::body::Body>> + Send + 'static,
{
    tokio::spawn(async move {
        let _hold = hold;
        let activity = Arc::new(Activity::default());
        let mut io = EdgeIo::new(server, activity.clone(), limits);
        assert!(!io.sniff().await.unwrap());
        serve_answers(io, activity, stopping, limits, answer).await;
    })
}

/// [`serve`] with `answer` as the service: each request counted in on `activity`
/// (the one `io` was made with) and out with its response body, as the gateway's
/// service does.
async fn serve_answers<F, Fut>(
    io: EdgeIo,
    activity: Arc<Activity>,
    stopping: tokio::sync::watch::Receiver<()>,
    limits: ConnLimits,
    answer: F,
) where
    F: Fn(Request<crate::server::RequestBody>) -> Fut,
    Fut: Future<Output = Response<crate::body::Body>>,
{
    serve(
        io,
        move |req| {
            let guard = activity.start(false);
            let fut = answer(req);
            async move {
                let lines = crate::server::lines::HeaderLines::default();
                Ok(fut.await.map(|b| Tracked::new(b, Some(guard), None, lines)))
            }
        },
        stopping,
        limits,
        canned::Refusals::default(),
    )
    .await;
}

/// Echoes the request body, with the method and path in `x-seen`.
async fn echo(req: Request<crate::server::RequestBody>) -> Response<crate::body::Body> {
    use http_body_util::BodyExt;
    let seen = format!("{} {}", req.method(), req.uri().path());
    let body = req.into_body().collect().await.map(|c| c.to_bytes());
    let mut resp = match body {
        Ok(b) => crate::body::json(http::StatusCode::OK, b),
        Err(e) => crate::body::json(http::StatusCode::BAD_REQUEST, e.to_string()),
    };
    resp.headers_mut()
        .insert("x-seen", HeaderValue::from_str(&seen).unwrap());
    resp
}

/// Reads one response (Content-Length framed) from `s`: the head and the body.
async fn read_response(s: &mut TcpStream) -> (String, String) {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).await.unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&got)
        );
        got.push(byte[0]);
    }
    let head = String::from_utf8(got).unwrap();
    let len: usize = head
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.parse().unwrap());
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_with_their_own_bodies() {
    let mut c = connection(echo).await;
    c.write_all(
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabcPOST /b HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\nGET /c HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await
    .unwrap();
    for (seen, body) in [("POST /a", "abc"), ("POST /b", "xy"), ("GET /c", "")] {
        let (head, got) = read_response(&mut c).await;
        assert!(head.contains(&format!("\r\nx-seen: {seen}\r\n")), "{head}");
        assert_eq!(got, body);
    }
}

#[tokio::test]
async fn a_body_sent_a_byte_at_a_time_arrives_whole() {
    let mut c = connection(echo).await;
    let wire = chunked(b"hello world", &[3, 8]);
    c.write_all(b"POST /slow HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    for b in wire {
        c.write_all(&[b]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (_, body) = read_response(&mut c).await;
    assert_eq!(body, "hello world");
}

#[tokio::test]
async fn continue_is_sent_when_the_body_is_read_and_not_when_it_is_refused() {
    let mut c = connection(|req: Request<crate::server::RequestBody>| async move {
        if req.uri().path() == "/refuse" {
            return crate::body::json(http::StatusCode::UNAUTHORIZED, "{}");
        }
        echo(req).await
    })
    .await;
    c.write_all(
        b"POST /read HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
    )
    .await
    .unwrap();
    let mut interim = [0u8; CONTINUE.len()];
    c.read_exact(&mut interim).await.unwrap();
    assert_eq!(&interim, CONTINUE);
    c.write_all(b"ok").await.unwrap();
    let (head, body) = read_response(&mut c).await;
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && !head.contains("connection"),
        "{head}"
    );
    assert_eq!(body, "ok");
    // Refused unread: the final answer comes without `100 Continue`, and the
    // connection closes since the client may still send the body.
    c.write_all(
        b"POST /refuse HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
    )
    .await
    .unwrap();
    let (head, _) = read_response(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert_eq!(c.read(&mut [0u8; 1]).await.unwrap(), 0, "closed");
}

#[tokio::test]
async fn an_unread_body_already_received_is_drained_and_the_connection_kept() {
    let mut c = connection(|req: Request<crate::server::RequestBody>| async move {
        if req.uri().path() == "/refuse" {
            return crate::body::json(http::StatusCode::UNAUTHORIZED, "{}");
        }
        echo(req).await
    })
    .await;
    c.write_all(
        b"POST /refuse HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhelloGET /after HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let (head, _) = read_response(&mut c).await;
    assert!(
        head.starts_with("HTTP/1.1 401 ") && !head.contains("connection"),
        "{head}"
    );
    let (head, _) = read_response(&mut c).await;
    assert!(head.contains("\r\nx-seen: GET /after\r\n"), "{head}");
}

#[tokio::test]
async fn a_malformed_head_gets_a_json_400_and_the_connection_closes() {
    let mut c = connection(echo).await;
    c.write_all(
        b"GET / HTTP/1.1\r\nhost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.contains("\"code\":\"malformed_request\""), "{out}");
}

#[tokio::test]
async fn a_stream_is_chunked_and_ends_with_the_last_chunk() {
    let mut c = connection(|_req| async {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        tokio::spawn(async move {
            for event in ["data: 1\n\n", "data: [DONE]\n\n"] {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
                    .await;
            }
        });
        let mut rx = rx;
        let events = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let body = http_body_util::StreamBody::new(events);
        Response::new(crate::body::Body::boxed(body))
    })
    .await;
    c.write_all(b"POST /s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert_eq!(
        body,
        "9\r\ndata: 1\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    );
}

#[tokio::test]
async fn a_body_cut_short_by_the_client_fails_the_read() {
    let mut c = connection(echo).await;
    c.write_all(b"POST /cut HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
        .await
        .unwrap();
    c.shutdown().await.unwrap();
    let (head, body) = read_response(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    assert!(
        body.contains("before the request body was complete"),
        "{body}"
    );
}

#[tokio::test]
async fn no_continue_is_sent_once_the_body_has_arrived() {
    let mut c = connection(echo).await;
    // The body's start right behind the head, as clients that do not wait send it,
    // and its rest later: the server then waits for bytes, and must not ask for them.
    c.write_all(b"POST /eager HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\nconnection: close\r\n\r\no")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    c.write_all(b"k").await.unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nok"), "{out}");
}

/// An answer whose body is `frames`, all ready at once, with `content-length` set to
/// `declared` if given.
fn frames_answer(
    frames: &'static [&'static str],
    declared: Option<u64>,
) -> Response<crate::body::Body> {
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(
        frames
            .iter()
            .map(|f| Ok::<_, BoxError>(Frame::data(Bytes::from_static(f.as_bytes())))),
    ));
    let mut r = Response::new(crate::body::Body::boxed(body));
    if let Some(n) = declared {
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    r
}

#[tokio::test]
async fn frames_ready_together_are_framed_as_chunks_in_order() {
    let mut c = connection(|_req| async { frames_answer(&["abc", "", "de", "f"], None) }).await;
    c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    let (_, body) = out.split_once("\r\n\r\n").unwrap();
    assert_eq!(body, "3\r\nabc\r\n2\r\nde\r\n1\r\nf\r\n0\r\n\r\n");
}

#[tokio::test]
async fn a_body_that_breaks_its_declared_length_ends_the_connection() {
    for (frames, declared, sent) in [(&["abc", "def"][..], 4, "abcd"), (&["ab"][..], 4, "ab")] {
        let mut c =
            connection(move |_req| async move { frames_answer(frames, Some(declared)) }).await;
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        // Keep-alive was asked for, yet the connection ends: the client cannot take
        // the answer as whole, and nothing past the declared length is sent.
        c.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("\r\ncontent-length: 4"), "{head}");
        assert_eq!(body, sent);
    }
}

/// Regression (attack on 5918ee9): a bare LF after the last chunk, or any bytes at
/// all, were taken as trailer lines, so the next request's head was swallowed as
/// trailers (a request desync behind a proxy that ends the body at `0\r\n\n`).
#[test]
fn trailers_must_be_fields_ended_by_crlf() {
    for wire in [
        &b"0\r\n\nGET / HTTP/1.1\r\nhost: x\r\n\r\n"[..],
        b"0\r\nX: 1\n\n",
        b"0\r\ngarbage\r\n\r\n",
        b"0\r\nX: a\rb\r\n\r\n",
        b"0\r\n: v\r\n\r\n",
        b"0\r\nX: a\0b\r\n\r\n",
    ] {
        let mut d = Decode::Chunked(Chunk::Size {
            size: 0,
            digits: 0,
            line: 0,
        });
        let mut buf = Bytes::copy_from_slice(wire);
        let failed = loop {
            match d.next(&mut buf) {
                Err(_) => break true,
                Ok(_) if d.is_done() || buf.is_empty() => break false,
                Ok(_) => {}
            }
        };
        assert!(failed, "{}", String::from_utf8_lossy(wire));
    }
    let (body, rest) =
        decode_in_pieces(b"1\r\na\r\n0\r\nx-a: 1\r\ny:\t2 \r\n\r\nnext", &[]).unwrap();
    assert_eq!((&body[..], &rest[..]), (&b"a"[..], &b"next"[..]));
}

/// Regression (attack on 5918ee9): a `Transfer-Encoding` field without a coding was
/// ignored, so the body was framed by `Content-Length` or taken as empty.
#[test]
fn an_empty_transfer_encoding_is_refused() {
    for raw in [
        &b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: \r\nContent-Length: 5\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: ,\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: \r\n\r\n",
    ] {
        assert_eq!(refused(raw), 400, "{}", String::from_utf8_lossy(raw));
    }
}

/// Regression (attack on 5918ee9): 16 hex digits were refused even when leading
/// zeros; only the value is bounded (RFC 9112 §7.1).
#[test]
fn chunk_sizes_with_leading_zeros_are_accepted() {
    let (body, _) = decode_in_pieces(b"0000000000000003\r\nabc\r\n00\r\n\r\n", &[]).unwrap();
    assert_eq!(body, b"abc");
}

/// Regression (attack on 5918ee9): a connection holding part of a head was closed
/// at shutdown as if idle; the head is now read, answered, and the connection closed.
#[tokio::test]
async fn shutdown_waits_for_a_head_that_has_begun() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (server, _) = l.accept().await.unwrap();
    let (stop, stopping) = tokio::sync::watch::channel(());
    let served = serve_on(server, ConnLimits::default(), stopping, None, echo);
    c.write_all(b"GET /begun HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.send_replace(());
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.write_all(b"\r\n").await.unwrap();
    let (head, _) = read_response(&mut c).await;
    assert!(head.contains("\r\nx-seen: GET /begun\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the connection ended after its answer")
        .unwrap();
}

#[tokio::test]
async fn a_head_sent_a_few_bytes_at_a_time_is_read_whole() {
    let mut c = connection(echo).await;
    let head = format!(
        "POST /pieces HTTP/1.1\r\nhost: x\r\n{}content-length: 2\r\n\r\nok",
        "x-pad: 0123456789\r\n".repeat(40)
    );
    for piece in head.as_bytes().chunks(7) {
        c.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let (head, body) = read_response(&mut c).await;
    assert!(head.contains("\r\nx-seen: POST /pieces\r\n"), "{head}");
    assert_eq!(body, "ok");
}

/// Empty lines before a request line are skipped however they arrive, and do not
/// make the head in pieces be taken as ended (each such false end cost a copy).
#[tokio::test]
async fn empty_lines_before_a_request_are_skipped() {
    let mut c = connection(echo).await;
    for piece in [
        &b"\r\n"[..],
        b"\r\n\r",
        b"\nGET /after-blank HTTP/1.1\r\n",
        b"host: x\r\n\r\n",
    ] {
        c.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (head, _) = read_response(&mut c).await;
    assert!(head.contains("\r\nx-seen: GET /after-blank\r\n"), "{head}");
}

/// An answer that never ends: 64 KiB frames as fast as the connection takes them.
fn endless_answer() -> Response<crate::body::Body> {
    let frame = Bytes::from(vec![b'x'; 64 * 1024]);
    let body = http_body_util::StreamBody::new(futures_util::stream::repeat_with(move || {
        Ok::<_, BoxError>(Frame::data(frame.clone()))
    }));
    Response::new(crate::body::Body::boxed(body))
}

/// Regression (review of the h1 server): while a request was in flight no deadline
/// covered writes, so a client that never read its answer held the connection,
/// and the upstream stream behind it, until shutdown. `send_timeout` now closes it.
#[tokio::test]
async fn a_client_that_reads_nothing_of_its_answer_is_closed_at_the_send_timeout() {
    let limits = ConnLimits {
        send_timeout: Duration::from_millis(200),
        ..ConnLimits::default()
    };
    let (mut c, served) = connection_with(limits, None, |_req| async { endless_answer() }).await;
    c.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Never read: the answer fills both socket buffers and the writes stall.
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("the stalled connection was closed")
        .unwrap();
}

/// A connection held to `send_timeout` whose client has asked for a 4 MiB answer
/// (and `connection: close`) and read none of it yet.
async fn asked_for_4_mib(send_timeout: Duration) -> TcpStream {
    let limits = ConnLimits {
        send_timeout,
        ..ConnLimits::default()
    };
    let (mut c, _served) = connection_with(limits, None, |_req| async {
        crate::body::json(http::StatusCode::OK, Bytes::from(vec![b'y'; 4 << 20]))
    })
    .await;
    c.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    c
}

/// Reads `c` to its end (or a read error) in reads of at most `chunk` bytes with
/// `pause` after each; the bytes read.
async fn read_steadily(c: &mut TcpStream, chunk: usize, pause: Duration) -> usize {
    let mut got = 0usize;
    let mut buf = vec![0u8; chunk];
    loop {
        let n = c.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return got;
        }
        got += n;
        tokio::time::sleep(pause).await;
    }
}

/// A client that reads slowly but steadily is not cut: only a write that waits
/// `send_timeout` without any progress ends the connection.
#[tokio::test]
async fn a_slow_but_steady_reader_gets_the_whole_answer() {
    let mut c = asked_for_4_mib(Duration::from_secs(2)).await;
    let got = read_steadily(&mut c, 64 * 1024, Duration::from_millis(5)).await;
    assert!(got > 4 << 20, "the whole answer and its head: {got} bytes");
}

/// The shared state of a connection on `server`, nothing read yet and no body.
fn shared_on(server: TcpStream) -> Shared {
    Shared::new(EdgeIo::new(
        server,
        Arc::new(Activity::default()),
        ConnLimits::default(),
    ))
}

/// Regression (review of the h1 server): a head gathered in pieces was moved out of
/// its growing buffer with `split`, which left the spare capacity, and with it the
/// whole allocation, referenced by the idle connection after the request was done.
#[tokio::test]
async fn a_head_gathered_in_pieces_leaves_no_allocation_behind() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let _client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (server, _) = l.accept().await.unwrap();
    let mut s = shared_on(server);
    s.grow = BytesMut::with_capacity(4096);
    s.grow
        .extend_from_slice(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    s.settle_head(head_cap(&ConnLimits::default()));
    assert!(!s.buf.is_empty(), "the head moved to be parsed");
    assert_eq!(s.grow.capacity(), 0, "nothing of its allocation kept");
}

/// Regression (review of the h1 server): a connection closed with request bytes
/// still arriving (here the body of a request answered without reading it) was
/// closed with unread bytes, so Linux sent a reset and dropped what of the answer
/// was still queued to send: the client, still uploading, saw a cut answer and
/// "connection reset". The server now ends its side and reads and drops what
/// follows until the client is done.
#[tokio::test]
async fn an_answer_to_a_client_still_uploading_arrives_whole_not_reset() {
    const ANSWER: usize = 1 << 20;
    const UPLOAD: usize = 8 << 20;
    for _ in 0..3 {
        // A small receive buffer keeps most of the answer queued at the server
        // when it closes.
        let (c, _served) = connection_with(ConnLimits::default(), Some(16 * 1024), |_req| async {
            crate::body::json(
                http::StatusCode::PAYLOAD_TOO_LARGE,
                Bytes::from(vec![b'a'; ANSWER]),
            )
        })
        .await;
        let (mut rd, mut wr) = c.into_split();
        let uploader = tokio::spawn(async move {
            let head = format!("POST / HTTP/1.1\r\nhost: x\r\ncontent-length: {UPLOAD}\r\n\r\n");
            wr.write_all(head.as_bytes()).await.unwrap();
            let block = vec![b'z'; 64 * 1024];
            for _ in 0..UPLOAD / block.len() {
                if wr.write_all(&block).await.is_err() {
                    return false;
                }
            }
            let _ = wr.shutdown().await;
            true
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut out = Vec::new();
        rd.read_to_end(&mut out)
            .await
            .expect("the answer and a clean end, not a reset");
        let text = String::from_utf8_lossy(&out[..out.len().min(200)]).into_owned();
        assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        assert!(
            out.ends_with(&[b'a'; 64]),
            "the whole answer ({} bytes)",
            out.len()
        );
        assert!(uploader.await.unwrap(), "the whole upload was taken");
    }
}

/// Regression (review of the h1 server): bytes of a request read by the protocol
/// sniff were not counted as a request begun, so a shutdown that came right after
/// the sniff closed the connection without an answer.
#[tokio::test]
async fn a_request_read_by_the_sniff_is_answered_at_shutdown() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (server, _) = l.accept().await.unwrap();
    c.write_all(b"GET /sniffed HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let activity = Arc::new(Activity::default());
    let mut io = EdgeIo::new(server, activity.clone(), ConnLimits::default());
    assert!(!io.sniff().await.unwrap());
    assert!(io.has_replay());
    let (stop, stopping) = tokio::sync::watch::channel(());
    stop.send_replace(());
    let served = tokio::spawn(serve_answers(
        io,
        activity,
        stopping,
        ConnLimits::default(),
        echo,
    ));
    let (head, _) = read_response(&mut c).await;
    assert!(head.contains("\r\nx-seen: GET /sniffed\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    served.await.unwrap();
}

/// Regression (review of the h1 server): a `100 Continue` partly written when the
/// service answered was dropped, so the final head followed a cut interim line.
/// It is now finished first, and the connection closes after the answer (the body
/// the client sends after it is not read).
#[tokio::test]
async fn a_continue_partly_written_is_finished_before_the_answer() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (server, _) = l.accept().await.unwrap();
    let mut s = shared_on(server);
    s.decode = Decode::Length(3);
    s.cont = Continue::Writing(5);
    let read_whole = std::future::poll_fn(|cx| s.poll_settle_body(cx)).await;
    assert!(
        !read_whole,
        "the body comes after the interim answer: unread"
    );
    assert_eq!(s.cont, Continue::No);
    let mut rest = vec![0u8; CONTINUE.len() - 5];
    c.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest[..], &CONTINUE[5..]);
}

/// Regression (review of the h1 server): `3 junk` was taken as a size followed by
/// extensions; after the size only whitespace, then `;` or the CRLF, may follow
/// (RFC 9112 §7.1.1).
#[test]
fn a_chunk_size_followed_by_other_than_an_extension_fails() {
    for wire in [
        &b"3 junk\r\nabc\r\n0\r\n\r\n"[..],
        b"3\tx;a=b\r\nabc\r\n0\r\n\r\n",
    ] {
        let mut d = Decode::Chunked(Chunk::Size {
            size: 0,
            digits: 0,
            line: 0,
        });
        let mut buf = Bytes::copy_from_slice(wire);
        assert!(
            d.next(&mut buf).is_err(),
            "{}",
            String::from_utf8_lossy(wire)
        );
    }
    for wire in [
        &b"3 ;ext=1\r\nabc\r\n0\r\n\r\n"[..],
        b"3\t \r\nabc\r\n0 ; last\r\n\r\n",
        b"3;a;b=\"c\"\r\nabc\r\n0\r\n\r\n",
    ] {
        let (body, rest) = decode_in_pieces(wire, &[]).unwrap();
        assert_eq!((&body[..], &rest[..]), (&b"abc"[..], &b""[..]));
    }
}

/// Regression (review of the h1 server): a body in `gzip, chunked` was decoded as
/// chunked and handed on still compressed; a coding not decoded here gets 501
/// (RFC 9112 §6.1).
#[test]
fn a_transfer_coding_other_than_chunked_gets_501() {
    for raw in [
        &b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nhost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let e = parse(raw).expect_err("refused");
        assert_eq!((e.status, e.reason), (501, "Not Implemented"));
    }
}

/// Regression (review of the h1 server): an HTTP/1.1 request without `Host`, or with
/// two, was served; RFC 9112 §3.2 requires 400 for both.
#[test]
fn host_must_appear_once_on_http_1_1() {
    let e = parse(b"GET / HTTP/1.1\r\n\r\n").expect_err("no Host");
    assert_eq!(
        (e.status, e.message),
        (400, "The HTTP/1.1 request has no Host header.")
    );
    let e = parse(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n").expect_err("two Hosts");
    assert_eq!(e.status, 400);
    assert_eq!(
        refused(b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"),
        400
    );
    assert!(
        head(b"GET / HTTP/1.0\r\n\r\n").parts.headers.is_empty(),
        "1.0 may omit it"
    );
    assert_eq!(
        head(b"GET / HTTP/1.1\r\nHOST: a\r\n\r\n").parts.headers["host"],
        "a"
    );
}

/// Regression (review of the h1 server): a CR not followed by LF before a request
/// line was skipped as if it were an empty line; only CRLF and LF are.
#[tokio::test]
async fn a_lone_cr_before_a_request_line_is_refused() {
    let mut c = connection(echo).await;
    c.write_all(b"\rGET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
}

/// A refused head's 400 says what is wrong in the OpenAI error shape.
#[tokio::test]
async fn a_missing_host_gets_a_400_naming_it() {
    let mut c = connection(echo).await;
    c.write_all(b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        v["error"]["message"],
        "The HTTP/1.1 request has no Host header."
    );
    assert_eq!(v["error"]["code"], "malformed_request");
}

/// Regression (attack on 7100e66): the lingering close decides whether the client "may
/// still be sending" only from bytes the server has already read (`buf`, `grow`,
/// the body's decode state). A next request that reached the kernel while the
/// answer was being made is not in `buf`, so the server closes with unread bytes
/// in its receive queue: Linux answers with a reset and drops what of the answer is
/// still queued to send. Here the next request arrives while the first is in
/// flight and shutdown begins, so the first answer goes out with
/// `connection: close`, and the client, which reads it a little later, sees a
/// reset instead of the whole answer.
#[tokio::test]
async fn an_answer_closed_with_a_next_request_in_the_kernel_is_not_reset() {
    const ANSWER: usize = 1 << 20;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut c = socket.connect(l.local_addr().unwrap()).await.unwrap();
    let (server, _) = l.accept().await.unwrap();
    let (stop, stopping) = tokio::sync::watch::channel(());
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let served = serve_on(server, ConnLimits::default(), stopping, None, move |_req| {
        let mut go = go_rx.clone();
        async move {
            // The answer is made while the client sends its next request.
            let _ = go.wait_for(|g| *g).await;
            crate::body::json(http::StatusCode::OK, Bytes::from(vec![b'a'; ANSWER]))
        }
    });
    c.write_all(b"GET /first HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A keep-alive client's next request (or a pipelined one), unread by the server.
    c.write_all(b"GET /second HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.send_replace(());
    go_tx.send_replace(true);
    // The client reads a moment later (the answer is queued at the server).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut out = Vec::new();
    let read = c.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out[..out.len().min(200)]).into_owned();
    assert!(
        read.is_ok(),
        "the answer and a clean end, not {read:?} after {} bytes: {text}",
        out.len()
    );
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(
        out.ends_with(&[b'a'; 64]),
        "the whole answer ({} bytes)",
        out.len()
    );
    let _ = served.await;
}

/// Regression (attack on 7100e66): `send_timeout` is meant to end only a write that
/// makes no progress, yet "progress" is seen only when the kernel wakes the writer,
/// which it does once a third of the (autotuned, up to `tcp_wmem` max) send buffer
/// has drained. A client reading steadily, but slower than that third per
/// `send_timeout`, is cut while it reads.
#[tokio::test]
async fn a_steady_reader_slower_than_a_third_of_the_send_buffer_per_timeout_is_kept() {
    let mut c = asked_for_4_mib(Duration::from_millis(500)).await;
    // Let the buffers fill, then read 32 KiB every 25 ms (1.3 MB/s): never a
    // pause of more than 25 ms on the client's side.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let got = read_steadily(&mut c, 32 * 1024, Duration::from_millis(25)).await;
    assert!(
        got > 4 << 20,
        "cut after {got} bytes in {:?} of steady reading",
        started.elapsed()
    );
}

/// Regression (attack on 7100e66): RFC 9112 §3.2 requires 400 for "a Host header field
/// with an invalid field value" as well as for a missing or repeated one; the new
/// rule counts Host fields only. `Host: a, b` is the very list form a proxy makes
/// of two Host lines (RFC 9110 §5.3), which the same rule refuses as two fields.
#[test]
fn a_host_that_is_not_a_uri_host_and_port_is_refused() {
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: a, b\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a:b\r\n\r\n",
    ] {
        assert_eq!(
            parse(raw).map(|h| h.is_some()).map_err(|e| e.status),
            Err(400),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    // Valid values stay accepted (the empty one too, RFC 9112 §3.2).
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: a.example:8080\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
    ] {
        assert!(parse(raw).is_ok(), "{}", String::from_utf8_lossy(raw));
    }
}
