//! The plain-HTTP client against scripted providers on 127.0.0.1: framing, reuse,
//! closes, cuts, and the bytes it writes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex as StdMutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// One scripted answer: its bytes, and whether the provider closes the connection
/// after writing them.
struct Answer {
    bytes: &'static [u8],
    close: bool,
}

fn keep(bytes: &'static [u8]) -> Answer {
    Answer {
        bytes,
        close: false,
    }
}

fn close(bytes: &'static [u8]) -> Answer {
    Answer { bytes, close: true }
}

/// What the scripted provider saw: each request's raw bytes, and how many
/// connections it accepted.
#[derive(Default)]
struct Seen {
    requests: StdMutex<Vec<Vec<u8>>>,
    accepts: AtomicUsize,
}

/// A provider on an ephemeral port that answers the n-th request it reads with
/// `script[n]` (whatever connection it came on).
async fn provider(script: Vec<Answer>) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let script = Arc::new(StdMutex::new(script.into_iter()));
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            s.accepts.fetch_add(1, Ordering::SeqCst);
            let (s, script) = (Arc::clone(&s), Arc::clone(&script));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(req) = read_request(&mut tcp, &mut buf).await else {
                        return;
                    };
                    s.requests.lock().unwrap().push(req);
                    let Some(a) = script.lock().unwrap().next() else {
                        return;
                    };
                    if tcp.write_all(a.bytes).await.is_err() || a.close {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// Reads one request (head, then a `content-length` or chunked body) from `tcp`.
async fn read_request(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = complete(buf) {
            return Some(buf.drain(..end).collect());
        }
        let n = tcp.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Length of the whole request at the start of `b`, once it is all there.
fn complete(b: &[u8]) -> Option<usize> {
    let head = b.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&b[..head]).to_ascii_lowercase();
    if text.contains("transfer-encoding: chunked") {
        let end = b[head..].windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(head + end + 5);
    }
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
    (b.len() >= head + len).then_some(head + len)
}

fn client() -> H1Client {
    H1Client::new(1, 16, Duration::from_secs(2))
}

fn post(base: &str, body: &'static str) -> Request<Body> {
    Request::post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(crate::body::full(body))
        .unwrap()
}

async fn text(res: Response<Body>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_length_framed_answer_is_read_and_its_connection_reused() {
    let (base, seen) = provider(vec![
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\n\r\nhello"),
        keep(b"HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nbye"),
    ])
    .await;
    let c = client();
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-a"], "1");
    assert_eq!(text(res).await, "hello");
    let res = c.send(post(&base, "{\"a\":1}")).await.unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(text(res).await, "bye");
    assert_eq!(
        seen.accepts.load(Ordering::SeqCst),
        1,
        "one connection for both"
    );
}

#[tokio::test]
async fn the_request_carries_host_and_length_and_no_connection_headers() {
    let (base, seen) = provider(vec![keep(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")]).await;
    let req = Request::post(format!("{base}/v1/x?y=1"))
        .header("authorization", "Bearer k")
        .header("connection", "x-hop")
        .header("keep-alive", "timeout=5")
        .header("transfer-encoding", "gzip")
        .header("content-length", "999")
        .body(crate::body::parts(vec![
            Bytes::from(vec![b'a'; 20_000]),
            Bytes::from_static(b"end"),
        ]))
        .unwrap();
    let res = client().send(req).await.unwrap();
    assert_eq!(text(res).await, "");
    let raw = seen.requests.lock().unwrap()[0].clone();
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(raw[..head_end].to_vec()).unwrap();
    let authority = base.trim_start_matches("http://");
    assert!(head.starts_with("POST /v1/x?y=1 HTTP/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("host: {authority}\r\n")), "{head}");
    assert!(head.contains("authorization: Bearer k"), "{head}");
    assert!(head.contains("content-length: 20003"), "{head}");
    for hop in ["connection", "keep-alive", "transfer-encoding", "999"] {
        assert!(!head.contains(hop), "{hop} sent: {head}");
    }
    assert_eq!(raw.len() - head_end - 4, 20_003, "the whole body, once");
}

/// A body of unknown length, one frame at a time.
struct Unsized(Vec<Bytes>);

impl http_body::Body for Unsized {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.0.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(self.0.remove(0)))))
    }
}

#[tokio::test]
async fn a_body_of_unknown_length_is_sent_chunked() {
    let (base, seen) = provider(vec![keep(
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
    )])
    .await;
    let body = Unsized(vec![
        Bytes::from_static(b"abc"),
        Bytes::from(vec![b'z'; 17]),
    ]);
    let req = Request::post(format!("{base}/"))
        .body(body.boxed_unsync().into())
        .unwrap();
    let res = client().send(req).await.unwrap();
    assert_eq!(text(res).await, "ok");
    let raw = String::from_utf8(seen.requests.lock().unwrap()[0].clone()).unwrap();
    assert!(raw.contains("transfer-encoding: chunked\r\n"), "{raw}");
    assert!(
        raw.ends_with(&format!(
            "\r\n\r\n3\r\nabc\r\n11\r\n{}\r\n0\r\n\r\n",
            "z".repeat(17)
        )),
        "{raw}"
    );
}

#[tokio::test]
async fn a_chunked_answer_is_decoded_and_its_connection_reused() {
    let (base, seen) = provider(vec![
        keep(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n"),
        keep(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
    ])
    .await;
    let c = client();
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(text(res).await, "hello world");
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(text(res).await, "ok");
    assert_eq!(seen.accepts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_that_closes_is_read_to_its_end_and_not_reused() {
    let (base, seen) = provider(vec![
        close(b"HTTP/1.1 200 OK\r\n\r\nto the end"),
        close(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"),
        close(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nhi"),
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlast"),
    ])
    .await;
    let c = client();
    for want in ["to the end", "ok", "hi", "last"] {
        let res = c.send(post(&base, "{}")).await.unwrap();
        assert_eq!(text(res).await, want);
    }
    assert_eq!(
        seen.accepts.load(Ordering::SeqCst),
        4,
        "each close ends its connection"
    );
}

#[tokio::test]
async fn interim_answers_are_skipped_and_bodiless_answers_free_the_connection() {
    let (base, seen) = provider(vec![
        keep(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        keep(b"HTTP/1.1 204 No Content\r\n\r\n"),
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"),
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n!"),
    ])
    .await;
    let c = client();
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(text(res).await, "ok");
    // Never polled: the connection must not wait for it.
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(res.status(), 204);
    drop(res);
    let head = Request::head(format!("{base}/"))
        .body(crate::body::empty())
        .unwrap();
    let res = c.send(head).await.unwrap();
    assert_eq!(res.headers()["content-length"], "10");
    drop(res);
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(text(res).await, "!");
    assert_eq!(seen.accepts.load(Ordering::SeqCst), 1);
    let raw = String::from_utf8(seen.requests.lock().unwrap()[2].clone()).unwrap();
    assert!(
        raw.starts_with("HEAD / HTTP/1.1\r\n") && !raw.contains("content-length"),
        "{raw}"
    );
}

#[tokio::test]
async fn a_body_cut_short_is_an_unexpected_eof_and_a_dropped_body_closes_its_connection() {
    let (base, seen) = provider(vec![
        close(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"),
        close(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"),
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial"),
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
    ])
    .await;
    let c = client();
    for _ in 0..2 {
        let res = c.send(post(&base, "{}")).await.unwrap();
        let e = res.into_body().collect().await.unwrap_err();
        let io = e.downcast_ref::<io::Error>().expect("an io::Error");
        assert_eq!(io.kind(), io::ErrorKind::UnexpectedEof, "{io}");
    }
    let mut res = c.send(post(&base, "{}")).await.unwrap();
    let first = res.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "partial");
    drop(res);
    let res = c.send(post(&base, "{}")).await.unwrap();
    assert_eq!(text(res).await, "ok");
    assert_eq!(
        seen.accepts.load(Ordering::SeqCst),
        4,
        "no connection reused mid-answer"
    );
}

#[tokio::test]
async fn a_connection_the_provider_closed_while_idle_is_not_used_again() {
    let (base, seen) = provider(vec![
        close(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na"),
        keep(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb"),
    ])
    .await;
    let c = client();
    assert_eq!(text(c.send(post(&base, "{}")).await.unwrap()).await, "a");
    // The provider's FIN arrives while the connection sits idle.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(text(c.send(post(&base, "{}")).await.unwrap()).await, "b");
    assert_eq!(seen.accepts.load(Ordering::SeqCst), 2);
    assert_eq!(
        seen.requests.lock().unwrap().len(),
        2,
        "each request sent once"
    );
}

#[tokio::test]
async fn the_reaper_closes_idle_connections_the_provider_closed() {
    let (base, _seen) = provider(vec![close(
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na",
    )])
    .await;
    let c = client();
    assert_eq!(text(c.send(post(&base, "{}")).await.unwrap()).await, "a");
    let held = |c: &H1Client| c.shared.lists[0].lock().unwrap().conns.len();
    // Read to its end before the provider's close arrived: kept for now.
    assert!(held(&c) <= 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let shared = Arc::downgrade(&c.shared);
    c.shared.lists[0].lock().unwrap().reaping = true;
    tokio::time::timeout(
        Duration::from_secs(5),
        reap(shared, 0, Duration::from_millis(10)),
    )
    .await
    .expect("the reaper stops once its list is empty");
    assert_eq!(held(&c), 0);
}

#[tokio::test]
async fn malformed_answers_are_errors_that_say_what_is_wrong() {
    let cases: [(&'static [u8], &str); 5] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
            "two different",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            "not a number",
        ),
        (b"SMTP ready\r\n\r\n", "not HTTP/1.1"),
        (b"", "closed before the response"),
        (b"HTTP/1.1 200 OK\r\ncont", "inside the response head"),
    ];
    for (answer, want) in cases {
        let (base, _) = provider(vec![close(answer)]).await;
        let e = client().send(post(&base, "{}")).await.unwrap_err();
        assert!(matches!(e, SendError::Exchange(_)), "{e:?}");
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    let e = H1Client::new(1, 1, Duration::from_secs(2))
        .send(post("http://127.0.0.1:1", "{}"))
        .await
        .unwrap_err();
    assert!(matches!(e, SendError::Connect(_)), "{e:?}");
}

#[test]
fn the_chunked_decoder_reads_a_body_split_anywhere() {
    let wire: &[u8] =
        b"4\r\nWiki\r\n7;name=v\r\npedia i\r\nB \r\nn \r\nchunks.\r\n0\r\nexpires: never\r\n\r\n";
    for split in 1..wire.len() {
        let mut state = Chunk::Size;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut done = false;
        for piece in wire.chunks(split) {
            buf.extend_from_slice(piece);
            loop {
                match state.step(&mut buf).unwrap() {
                    Step::Data(d) => out.extend_from_slice(&d),
                    Step::More => break,
                    Step::Done => {
                        done = true;
                        break;
                    }
                }
            }
        }
        assert!(done, "split {split}");
        assert_eq!(out, b"Wikipedia in \r\nchunks.", "split {split}");
        assert!(buf.is_empty());
    }
    for bad in [&b"g\r\n"[..], b"\r\n", b"1\r\nab", b"11111111111111111\r\n"] {
        let mut state = Chunk::Size;
        let mut buf = BytesMut::from(bad);
        let mut r = Ok(Step::More);
        for _ in 0..4 {
            r = state.step(&mut buf);
            if !matches!(r, Ok(Step::Data(_))) {
                break;
            }
        }
        assert!(r.is_err(), "{:?}: {r:?}", String::from_utf8_lossy(bad));
    }
}

/// A provider that reads a request's head, answers 413 and then, as `after` says,
/// stops reading with the connection open, closes it (a reset, with the body
/// unread), or resets it outright.
async fn refusing_provider(after: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            head.extend_from_slice(&buf[..n]);
        }
        let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo big!";
        tcp.write_all(answer).await.unwrap();
        match after {
            "stop reading" => tokio::time::sleep(Duration::from_secs(30)).await,
            "close" => drop(tcp),
            _ => {
                socket2::SockRef::from(&tcp)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(tcp);
            }
        }
    });
    base
}

#[tokio::test]
async fn an_answer_sent_before_the_request_was_read_is_the_outcome() {
    for after in ["stop reading", "close", "reset"] {
        let base = refusing_provider(after).await;
        let req = Request::post(format!("{base}/"))
            .body(crate::body::full(vec![b'x'; 32 << 20]))
            .unwrap();
        let c = client();
        // 32 MiB cannot all be written to a provider that stopped reading: the
        // writing stops at its answer, which is what the caller gets.
        let res = tokio::time::timeout(Duration::from_secs(10), c.send(req))
            .await
            .unwrap_or_else(|_| panic!("{after}: waited for a write that cannot finish"))
            .unwrap_or_else(|e| panic!("{after}: the provider's answer, not {e:?}"));
        assert_eq!(res.status(), 413, "{after}");
        assert_eq!(text(res).await, "too big!", "{after}");
        assert_eq!(
            c.shared.lists[0].lock().unwrap().conns.len(),
            0,
            "{after}: not reused"
        );
    }
}

#[tokio::test]
async fn framing_edge_cases_of_rfc_9112_are_read_as_it_says() {
    let (base, _) = provider(vec![
        // Leading zeros in a chunk size, beyond 16 digits.
        keep(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n00000000000000000002\r\nok\r\n000000000000000000000\r\n\r\n"),
        // An empty last list element is not a coding.
        keep(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked,\r\n\r\n2\r\nhi\r\n0\r\n\r\n"),
    ])
    .await;
    let c = client();
    assert_eq!(text(c.send(post(&base, "{}")).await.unwrap()).await, "ok");
    assert_eq!(text(c.send(post(&base, "{}")).await.unwrap()).await, "hi");
    // A head past 256 KiB that arrives whole in one read is refused too.
    let big: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 0\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let (base, _) = provider(vec![close(big)]).await;
    let e = client().send(post(&base, "{}")).await.unwrap_err();
    assert!(e.to_string().contains("larger than 256 KiB"), "{e}");
}

#[tokio::test]
async fn a_request_waiting_for_its_answer_holds_no_read_buffer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut provider, _) = listener.accept().await.unwrap();
    let mut ex = Exchange {
        conn: Conn {
            tcp,
            key: Arc::from(addr.to_string()),
        },
        buf: BytesMut::new(),
        early: None,
        closed: false,
    };
    // Nothing sent yet: the read waits without taking room.
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    assert!(ex.poll_fill(&mut cx).is_pending());
    assert_eq!(ex.buf.capacity(), 0, "room taken before the answer arrived");
    provider.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
    let n = std::future::poll_fn(|cx| ex.poll_fill(cx)).await.unwrap();
    assert_eq!(&ex.buf[..n], b"HTTP/1.1 200 OK\r\n");
    assert!(ex.buf.capacity() >= READ_CHUNK);
}

/// Notes when the bytes it owns are freed.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl AsRef<[u8]> for DropFlag {
    fn as_ref(&self) -> &[u8] {
        b"Bearer sk-test"
    }
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_request_waiting_for_its_answer_held_its_header_fields() {
    // The provider reads the request and answers only when told: while the client
    // waits, the request's header fields (here one value whose bytes note their
    // drop) must already be freed.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (answer, answered) = tokio::sync::oneshot::channel::<()>();
    let (got, read) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        read_request(&mut tcp, &mut buf).await.unwrap();
        got.send(()).unwrap();
        answered.await.unwrap();
        tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
    });
    let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let value = Bytes::from_owner(DropFlag(Arc::clone(&freed)));
    let mut req = post(&format!("http://{addr}"), "{}");
    req.headers_mut().insert(
        http::header::AUTHORIZATION,
        http::HeaderValue::from_maybe_shared(value).unwrap(),
    );
    let c = client();
    let mut send = std::pin::pin!(c.send(req));
    // Drive the send until the provider has the whole request.
    tokio::select! {
        _ = &mut send => panic!("answered before the provider wrote"),
        r = read => r.unwrap(),
    }
    // One more pass, so the client is past its write and waiting for the head.
    tokio::select! {
        biased;
        _ = &mut send => panic!("answered before the provider wrote"),
        _ = tokio::task::yield_now() => {}
    }
    assert!(
        freed.load(Ordering::SeqCst),
        "the request's header fields are held while the answer is awaited"
    );
    answer.send(()).unwrap();
    let res = send.await.unwrap();
    assert_eq!(text(res).await, "{}");
}

#[tokio::test]
async fn fields_the_gateway_never_reads_are_left_out_of_the_answers_map() {
    let (base, _seen) = provider(vec![keep(
        b"HTTP/1.1 200 OK\r\nDate: Fri, 04 Dec 2026 17:00:00 GMT\r\nServer: nginx\r\n\
Content-Type: application/json\r\nSet-Cookie: a=b\r\nSET-COOKIE: c=d\r\nETag: \"x\"\r\n\
cf-ray: 1\r\nVary: Origin\r\nKeep-Alive: timeout=5\r\nalt-svc: h3=\":443\"\r\n\
Strict-Transport-Security: max-age=1\r\nLast-Modified: x\r\nAccept-Ranges: bytes\r\n\
cf-cache-status: DYNAMIC\r\nX-Content-Type-Options: nosniff\r\nServer: again\r\n\
x-request-id: req-1\r\nx-ratelimit-remaining-requests: 9\r\n\
Retry-After: 2\r\nContent-Length: 2\r\n\r\n{}",
    )])
    .await;
    let res = client().send(post(&base, "{}")).await.unwrap();
    let mut names: Vec<&str> = res.headers().keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "content-length",
            "content-type",
            "retry-after",
            "x-ratelimit-remaining-requests",
            "x-request-id"
        ]
    );
    assert_eq!(text(res).await, "{}");
}

proptest::proptest! {
    /// `is_name` is `eq_ignore_ascii_case` for every token (`tchar` bytes, either
    /// case) against every name the head parse looks for, lengths around theirs.
    #[test]
    fn a_field_name_compares_as_eq_ignore_ascii_case_for_every_token(
        token in proptest::collection::vec(
            proptest::sample::select(
                b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    .to_vec(),
            ),
            0..30,
        ),
        target in proptest::sample::select(vec![
            &b"content-length"[..], b"transfer-encoding", b"connection", b"date", b"etag",
            b"vary", b"server", b"cf-ray", b"alt-svc", b"set-cookie", b"keep-alive",
            b"last-modified", b"accept-ranges", b"cf-cache-status",
            b"x-content-type-options", b"strict-transport-security",
        ]),
        flip in proptest::collection::vec(proptest::bool::ANY, 30),
    ) {
        assert!(httparse_token(&token));
        proptest::prop_assert_eq!(is_name(&token, target), token.eq_ignore_ascii_case(target));
        // The target itself in a random case, so that matches are common.
        let cased: Vec<u8> = target
            .iter()
            .zip(&flip)
            .map(|(&b, &up)| if up { b.to_ascii_uppercase() } else { b })
            .collect();
        proptest::prop_assert!(is_name(&cased, target));
        let mut near = cased.clone();
        if let Some(last) = near.last_mut() {
            *last ^= 0x01;
        }
        proptest::prop_assert_eq!(is_name(&near, target), near.eq_ignore_ascii_case(target));
    }
}

/// Whether `t` is made of RFC 9110 `tchar` bytes (what the generator above makes).
fn httparse_token(t: &[u8]) -> bool {
    t.iter()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
}
