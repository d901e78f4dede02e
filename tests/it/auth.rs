//! Authentication (issue 12): API keys, the key file, JWTs and JWKS, scopes, and the
//! admin endpoints, on gateways started in process.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use ring::signature::KeyPair as _;
use serde_json::json;

use crate::common::{chat, request_with, InProcess};
use switchyard::auth::keys::hash_secret;

const MOCKS: &str = "providers:\n  a: { kind: mock }\n  b: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: a, model: x } ] }\n  n: { endpoints: [ { provider: a, model: x }, { provider: b, model: y } ] }\n";

const RSA_PEM: &[u8] = include_bytes!("../fixtures/test_rsa_key.pem");
const RSA_PUB_PEM: &[u8] = include_bytes!("../fixtures/test_rsa_pub.pem");
const RSA_JWK: &str = include_str!("../fixtures/test_rsa_jwk.json");

/// Starts a gateway whose directory holds `files` `(name, text)` beside the config.
async fn start(config: &str, files: &[(&str, &str)]) -> InProcess {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, config).unwrap();
    let mut config = switchyard::config::parse_str(config, Some(&path)).expect("valid config");
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    if config.admin.listen.is_some() {
        config.admin.listen = Some("127.0.0.1:0".parse().unwrap());
    }
    let policy = switchyard::routing::policy::load(&config).expect("valid policies");
    let opts = switchyard::app::AppOptions {
        watch: false,
        ..Default::default()
    };
    let app = switchyard::app::App::start(config, policy, opts)
        .await
        .expect("app starts");
    InProcess { app, _dir: dir }
}

async fn call(gw: &InProcess, model: &str, headers: &[(&str, &str)]) -> crate::common::Reply {
    request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        headers,
        chat(model, false, ""),
    )
    .await
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn assert_401(r: &crate::common::Reply) {
    assert_eq!(r.status, 401, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "authentication_error");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    assert_eq!(
        v["error"]["message"],
        "invalid or missing API key or token; send it as `Authorization: Bearer <key>`",
        "one message whatever was wrong"
    );
}

fn keys_config(extra: &str) -> String {
    format!(
        "auth:\n  mode: keys\n  keys:\n    - {{ id: key-all, hash: '{}', org: org-a, priority: high, limits: {{ requests_per_min: 600 }} }}\n    - {{ id: key-m, hash: '{}', models: [m] }}\n    - {{ id: key-b, hash: '{}', providers: [b] }}\n    - {{ id: key-old, hash: '{}', revoked: true }}\n{extra}{MOCKS}",
        hash_secret("sy-all"),
        hash_secret("sy-m"),
        hash_secret("sy-b"),
        hash_secret("sy-old"),
    )
}

#[tokio::test]
async fn api_keys_no_key_wrong_key_revoked_key_and_model_scope() {
    let gw = start(&keys_config(""), &[]).await;
    assert_401(&call(&gw, "m", &[]).await);
    assert_401(&call(&gw, "m", &[("authorization", &bearer("sy-nope"))]).await);
    assert_401(&call(&gw, "m", &[("authorization", &bearer("sy-old"))]).await);
    // Credentials are checked before the body: a bad body without a key is a 401.
    let r = request_with("POST", &gw.url("/v1/chat/completions"), &[], "{").await;
    assert_401(&r);
    // A valid key, every header the SDKs use.
    for h in ["authorization", "x-api-key", "api-key"] {
        let v = if h == "authorization" {
            bearer("sy-all")
        } else {
            "sy-all".into()
        };
        let r = call(&gw, "m", &[(h, &v)]).await;
        assert_eq!(r.status, 200, "{h}: {}", r.text());
    }
    // Model scope: m allowed, n not.
    let ok = call(&gw, "m", &[("authorization", &bearer("sy-m"))]).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let r = call(&gw, "n", &[("authorization", &bearer("sy-m"))]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "permission_error");
    assert_eq!(v["error"]["code"], "model_not_allowed");
    assert!(v["error"]["message"].as_str().unwrap().contains("`n`"));
    assert!(!r.text().contains("sy-m") && !r.text().contains("key-m"));
}

/// Found by the operator attack of 2026-12-07: a body over `server.max_body_bytes`
/// without a key got 413, where a client without valid credentials gets 401
/// whatever it sent; with a valid key the 413 stays.
#[tokio::test]
async fn an_oversized_body_without_a_key_got_413_not_401() {
    let gw = start(&keys_config("server: { max_body_bytes: 1000 }\n"), &[]).await;
    let big = chat("m", false, &format!(r#","user":"{}""#, "x".repeat(5000)));
    let r = request_with("POST", &gw.url("/v1/chat/completions"), &[], big.clone()).await;
    assert_401(&r);
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("authorization", &bearer("sy-all"))],
        big,
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.text());
}

/// Found by attack (2026-12-05): `GET /v1/models` answered anyone, with every model,
/// whatever the key's scope; OpenAI's needs the key and lists what it may use.
#[tokio::test]
async fn listing_models_needs_a_key_and_shows_what_the_key_may_use() {
    let gw = start(&keys_config(""), &[]).await;
    let get = |path: &'static str, key: Option<&'static str>| {
        let url = gw.url(path);
        async move {
            let auth = key.map(bearer);
            let headers: Vec<(&str, &str)> =
                auth.iter().map(|a| ("authorization", a.as_str())).collect();
            request_with("GET", &url, &headers, "").await
        }
    };
    for key in [None, Some("sy-nope"), Some("sy-old")] {
        assert_401(&get("/v1/models", key).await);
        assert_401(&get("/v1/models/m", key).await);
    }
    let ids = |r: &crate::common::Reply| -> Vec<String> {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["object"], "list");
        r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&get("/v1/models", Some("sy-all")).await), ["m", "n"]);
    assert_eq!(ids(&get("/v1/models", Some("sy-m")).await), ["m"]);
    // Retrieve: the model object, or 404 alike for a model that does not exist and
    // for one the key may not use.
    let r = get("/v1/models/m", Some("sy-m")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["id"].as_str(), v["object"].as_str()),
        (Some("m"), Some("model"))
    );
    assert_eq!(v["owned_by"], "switchyard");
    for (path, key) in [("/v1/models/n", "sy-m"), ("/v1/models/zz", "sy-all")] {
        let r = get(path, Some(key)).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], "model_not_found", "{path}");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    assert_eq!(get("/v1/models/n", Some("sy-all")).await.status, 200);
}

#[tokio::test]
async fn provider_scope_filters_the_plan() {
    let gw = start(&keys_config(""), &[]).await;
    // n has endpoints on a and b: only b's is left for key-b.
    for _ in 0..4 {
        let r = call(&gw, "n", &[("authorization", &bearer("sy-b"))]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "b/y");
    }
    // m is only on a: nothing left.
    let r = call(&gw, "m", &[("authorization", &bearer("sy-b"))]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "provider_not_allowed");
}

#[tokio::test]
async fn verified_keys_are_what_policies_see() {
    let policy = r#"
route r when request.model == "m" {
  rule by_key when has(request.api_key) and request.api_key == "key-all" and has(request.org) and request.org == "org-a" {
    use endpoint "a/x"
  }
  default reject 418 "not the verified key"
}
"#;
    let dir_cfg = format!("policies: {{ dir: policies }}\n{}", keys_config(""));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    std::fs::write(dir.path().join("policies/r.policy"), policy).unwrap();
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, &dir_cfg).unwrap();
    let mut config = switchyard::config::parse_str(&dir_cfg, Some(&path)).unwrap();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    let snap = switchyard::routing::policy::load(&config).expect("valid policy");
    let app = switchyard::app::App::start(
        config,
        snap,
        switchyard::app::AppOptions {
            watch: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let gw = InProcess { app, _dir: dir };
    // The OpenAI-Organization header is ignored for a verified key.
    let r = call(
        &gw,
        "m",
        &[
            ("authorization", &bearer("sy-all")),
            ("openai-organization", "org-forged"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(&gw, "m", &[("authorization", &bearer("sy-m"))]).await;
    assert_eq!(r.status, 418, "{}", r.text());
}

/// A gateway whose key file `keys.yaml` holds key `key-one` (secret `sy-one`), and
/// that file's text.
async fn key_file_gateway() -> (InProcess, String) {
    let one = format!(
        "keys:\n  - {{ id: key-one, hash: '{}' }}\n",
        hash_secret("sy-one")
    );
    let gw = start(
        &format!("auth: {{ mode: keys, key_file: keys.yaml }}\n{MOCKS}"),
        &[("keys.yaml", &one)],
    )
    .await;
    (gw, one)
}

#[tokio::test]
async fn key_file_edited_while_serving() {
    let (gw, _) = key_file_gateway().await;
    let ok = call(&gw, "m", &[("authorization", &bearer("sy-one"))]).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_401(&call(&gw, "m", &[("authorization", &bearer("sy-two"))]).await);
    // Revoke one, add two, by a rename over the file (as editors save).
    let both = format!(
        "keys:\n  - {{ id: key-one, hash: '{}', revoked: true }}\n  - {{ id: key-two, hash: '{}' }}\n",
        hash_secret("sy-one"),
        hash_secret("sy-two")
    );
    let dir = gw._dir.path();
    std::fs::write(dir.join("keys.yaml.new"), both).unwrap();
    std::fs::rename(dir.join("keys.yaml.new"), dir.join("keys.yaml")).unwrap();
    // A bound on liveness, not a timing check: the change is seen on the first
    // request one `FILE_POLL` after the last look, and a loaded test machine (the
    // whole suite on two cores) has taken longer than four polls to get there.
    let deadline = std::time::Instant::now() + switchyard::auth::FILE_POLL * 20;
    loop {
        let r = call(&gw, "m", &[("authorization", &bearer("sy-two"))]).await;
        if r.status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new key was not accepted within the reload bound"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_401(&call(&gw, "m", &[("authorization", &bearer("sy-one"))]).await);
    // A broken save keeps the previous keys serving.
    std::fs::write(dir.join("keys.yaml"), "keys: [ {").unwrap();
    tokio::time::sleep(switchyard::auth::FILE_POLL * 2).await;
    let r = call(&gw, "m", &[("authorization", &bearer("sy-two"))]).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Found by the admission attack of 2026-12-08: an in-place save truncates the key
/// file before writing it, and a look in between read it as "no keys", so every
/// client got 401 until the next look. A key file that reads as empty while keys
/// are serving is taken only once it has stayed so for `auth::FILE_SETTLE`; one
/// emptied on purpose still takes effect after that.
#[tokio::test]
async fn a_key_file_caught_empty_mid_save_refused_every_key() {
    let (gw, one) = key_file_gateway().await;
    let file = gw._dir.path().join("keys.yaml");
    for blank in ["", "keys:\n"] {
        std::fs::write(&file, blank).unwrap();
        let truncated = std::time::Instant::now();
        // Within the settle time the blank file is never taken, however the looks
        // fall: the first look that reads it is after the truncation.
        while truncated.elapsed() < switchyard::auth::FILE_SETTLE * 4 / 5 {
            let r = call(&gw, "m", &[("authorization", &bearer("sy-one"))]).await;
            assert_eq!(r.status, 200, "{blank:?}: {}", r.text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The save completes.
        std::fs::write(&file, &one).unwrap();
        tokio::time::sleep(switchyard::auth::FILE_POLL * 3).await;
        let r = call(&gw, "m", &[("authorization", &bearer("sy-one"))]).await;
        assert_eq!(r.status, 200, "{blank:?}: {}", r.text());
    }
    // Emptied on purpose: taken once it has stayed so.
    std::fs::write(&file, "keys: []\n").unwrap();
    let deadline = std::time::Instant::now() + switchyard::auth::FILE_POLL * 20;
    loop {
        let r = call(&gw, "m", &[("authorization", &bearer("sy-one"))]).await;
        if r.status == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "an emptied key file was never taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// --- JWT ------------------------------------------------------------------------

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// A fresh P-256 key: its PKCS#8 DER and its JWK (with `kid`).
fn ec_key(kid: &str) -> (Vec<u8>, serde_json::Value) {
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref();
    let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
        "x": b64(&point[1..33]), "y": b64(&point[33..65])});
    (pkcs8.as_ref().to_vec(), jwk)
}

fn rsa_jwk(kid: &str) -> serde_json::Value {
    let mut j: serde_json::Value = serde_json::from_str(RSA_JWK).unwrap();
    j["kid"] = json!(kid);
    j
}

fn jwks(keys: &[serde_json::Value]) -> String {
    json!({ "keys": keys }).to_string()
}

fn claims(extra: serde_json::Value) -> serde_json::Value {
    let mut c = json!({"sub": "svc-search", "org": "org-jwt", "iss": "https://idp.test",
        "aud": "switchyard", "exp": now() + 600, "scope": "chat:m"});
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn rs256(kid: &str, c: &serde_json::Value) -> String {
    let mut h = Header::new(Algorithm::RS256);
    h.kid = Some(kid.into());
    encode(&h, c, &EncodingKey::from_rsa_pem(RSA_PEM).unwrap()).unwrap()
}

fn es256(kid: &str, der: &[u8], c: &serde_json::Value) -> String {
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some(kid.into());
    encode(&h, c, &EncodingKey::from_ec_der(der)).unwrap()
}

fn hs256(secret: &[u8], kid: Option<&str>, c: &serde_json::Value) -> String {
    let mut h = Header::new(Algorithm::HS256);
    h.kid = kid.map(str::to_string);
    encode(&h, c, &EncodingKey::from_secret(secret)).unwrap()
}

const HS_VAR: &str = "SWITCHYARD_TEST_AUTH_HS256_SECRET";

fn jwt_config() -> String {
    // Tests in this binary run on threads of one process; this variable is only
    // read by the gateways of this file, always with this value.
    std::env::set_var(HS_VAR, "an-hs256-test-secret-of-some-length");
    format!(
        "auth:\n  mode: keys_or_jwt\n  keys: [ {{ id: key-all, hash: '{}' }} ]\n  jwt:\n    hs256_secret_env: {HS_VAR}\n    jwks_file: jwks.json\n    issuer: https://idp.test\n    audience: switchyard\n    leeway_s: 5\n    scopes:\n      chat:m: {{ models: [m] }}\n      chat:all: {{}}\n      via:b: {{ providers: [b] }}\n{MOCKS}",
        hash_secret("sy-all")
    )
}

#[tokio::test]
async fn jwts_are_checked_for_time_issuer_audience_and_signature() {
    let (ec_der, ec_jwk) = ec_key("ec-1");
    let gw = start(
        &jwt_config(),
        &[("jwks.json", &jwks(&[rsa_jwk("rsa-1"), ec_jwk]))],
    )
    .await;
    let go = |t: String| {
        let gw = &gw;
        async move { call(gw, "m", &[("authorization", &bearer(&t))]).await }
    };
    // Valid RS256, ES256 and HS256 tokens.
    let r = go(rs256("rsa-1", &claims(json!({})))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = go(es256("ec-1", &ec_der, &claims(json!({})))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let secret = std::env::var(HS_VAR).unwrap();
    let r = go(hs256(secret.as_bytes(), None, &claims(json!({})))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // And an API key still works in keys_or_jwt.
    let r = call(&gw, "m", &[("authorization", &bearer("sy-all"))]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Expired (past the leeway), not yet valid, no exp at all.
    assert_401(&go(rs256("rsa-1", &claims(json!({"exp": now() - 60})))).await);
    assert_401(&go(rs256("rsa-1", &claims(json!({"nbf": now() + 600})))).await);
    assert_401(&go(rs256("rsa-1", &claims(json!({"exp": null})))).await);
    // Within the leeway is fine.
    let r = go(rs256("rsa-1", &claims(json!({"exp": now() - 2})))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Wrong issuer, wrong audience.
    assert_401(&go(rs256("rsa-1", &claims(json!({"iss": "https://evil.test"})))).await);
    assert_401(&go(rs256("rsa-1", &claims(json!({"aud": "someone-else"})))).await);
    // Bad signature: a valid token with its last signature character changed.
    let mut t = rs256("rsa-1", &claims(json!({})));
    let last = t.pop().unwrap();
    t.push(if last == 'A' { 'B' } else { 'A' });
    assert_401(&go(t).await);
    // Unknown kid, and the EC kid on an RS256 token.
    assert_401(&go(rs256("rsa-9", &claims(json!({})))).await);
    assert_401(&go(rs256("ec-1", &claims(json!({})))).await);
    // alg: none, with and without an empty signature.
    let none_header = b64(br#"{"alg":"none","typ":"JWT"}"#);
    let body = b64(claims(json!({})).to_string().as_bytes());
    assert_401(&go(format!("{none_header}.{body}.")).await);
    let none_header = b64(br#"{"alg":"None","typ":"JWT","kid":"rsa-1"}"#);
    assert_401(&go(format!("{none_header}.{body}.")).await);
    // HS/RS confusion: HS256 signed with the RSA public key as the secret.
    assert_401(&go(hs256(RSA_PUB_PEM, Some("rsa-1"), &claims(json!({})))).await);
    assert_401(&go(hs256(RSA_PUB_PEM, None, &claims(json!({})))).await);
}

#[tokio::test]
async fn jwt_scopes_grant_models_and_providers() {
    let gw = start(&jwt_config(), &[("jwks.json", &jwks(&[rsa_jwk("rsa-1")]))]).await;
    let with = |scope: serde_json::Value, model: &'static str| {
        let gw = &gw;
        async move {
            let t = rs256("rsa-1", &claims(scope));
            call(gw, model, &[("authorization", &bearer(&t))]).await
        }
    };
    // chat:m allows m only.
    assert_eq!(with(json!({}), "m").await.status, 200);
    let r = with(json!({}), "n").await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "model_not_allowed");
    // `scp` as an array: via:b grants every model, on provider b only.
    for _ in 0..4 {
        let r = with(json!({"scope": null, "scp": ["via:b"]}), "n").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["x-switchyard-endpoint"], "b/y");
    }
    // A union: chat:all grants every provider, so n may go anywhere again.
    let r = with(json!({"scope": null, "scp": ["chat:all", "via:b"]}), "n").await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A scope not in the map grants nothing.
    let r = with(json!({"scope": "unknown:scope"}), "m").await;
    assert_eq!(r.status, 403, "{}", r.text());
}

#[tokio::test]
async fn jwt_scopes_are_what_scope_in_a_policy_sees() {
    // No `auth.jwt.scopes` map, so every token may use every model: only the policy
    // looks at the scopes.
    let config = format!(
        "policies: {{ dir: policies }}\nauth:\n  mode: keys_or_jwt\n  keys: [ {{ id: key-all, hash: '{}' }} ]\n  jwt:\n    jwks_file: jwks.json\n    issuer: https://idp.test\n    audience: switchyard\n{MOCKS}",
        hash_secret("sy-all")
    );
    let policy = "route r when scope(\"beta\") { default use endpoint \"b/y\" }\nroute rest when not scope(\"beta\") { default use endpoint \"a/x\" }\n";
    let gw = start(
        &config,
        &[
            ("jwks.json", &jwks(&[rsa_jwk("rsa-1")])),
            ("policies/scopes.policy", policy),
        ],
    )
    .await;
    let endpoint = |auth: String| {
        let gw = &gw;
        async move {
            let r = call(gw, "n", &[("authorization", &auth)]).await;
            assert_eq!(r.status, 200, "{}", r.text());
            (
                r.headers["x-switchyard-route"]
                    .to_str()
                    .unwrap()
                    .to_string(),
                r.headers["x-switchyard-endpoint"]
                    .to_str()
                    .unwrap()
                    .to_string(),
            )
        }
    };
    let token = |scope: serde_json::Value| bearer(&rs256("rsa-1", &claims(scope)));
    let beta = ("r".to_string(), "b/y".to_string());
    let rest = ("rest".to_string(), "a/x".to_string());
    assert_eq!(endpoint(token(json!({"scope": "pro beta"}))).await, beta);
    assert_eq!(
        endpoint(token(json!({"scope": null, "scp": ["beta"]}))).await,
        beta
    );
    // Without the scope (another scope, none at all, a prefix of it) it goes elsewhere.
    assert_eq!(endpoint(token(json!({"scope": "pro"}))).await, rest);
    assert_eq!(endpoint(token(json!({"scope": null}))).await, rest);
    assert_eq!(
        endpoint(token(json!({"scope": "bet beta:read"}))).await,
        rest
    );
    // An API key carries no scopes; nor does a header claiming one.
    assert_eq!(endpoint(bearer("sy-all")).await, rest);
    let r = call(
        &gw,
        "n",
        &[("authorization", &bearer("sy-all")), ("scope", "beta")],
    )
    .await;
    assert_eq!(r.headers["x-switchyard-endpoint"], "a/x");
}

#[tokio::test]
async fn rotated_jwks_accepts_the_new_kid() {
    let (old_der, old_jwk) = ec_key("ec-old");
    let gw = start(&jwt_config(), &[("jwks.json", &jwks(&[old_jwk]))]).await;
    let (new_der, new_jwk) = ec_key("ec-new");
    let new_token = es256("ec-new", &new_der, &claims(json!({})));
    assert_401(&call(&gw, "m", &[("authorization", &bearer(&new_token))]).await);
    let path = gw._dir.path().join("jwks.json");
    std::fs::write(path.with_extension("tmp"), jwks(&[new_jwk])).unwrap();
    std::fs::rename(path.with_extension("tmp"), &path).unwrap();
    // A bound on liveness, not a timing check: the change is seen on the first
    // request one `FILE_POLL` after the last look, and a loaded test machine (the
    // whole suite on two cores) has taken longer than four polls to get there.
    let deadline = std::time::Instant::now() + switchyard::auth::FILE_POLL * 20;
    loop {
        let r = call(&gw, "m", &[("authorization", &bearer(&new_token))]).await;
        if r.status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "new kid not accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old key is gone with the old file.
    let old_token = es256("ec-old", &old_der, &claims(json!({})));
    assert_401(&call(&gw, "m", &[("authorization", &bearer(&old_token))]).await);
}

// --- admin ----------------------------------------------------------------------

#[tokio::test]
async fn admin_endpoints_need_the_admin_key() {
    let cfg = format!(
        "admin:\n  keys: [ '{}' ]\n  metrics: {{ allow: [ 10.0.0.0/8 ] }}\n{MOCKS}",
        hash_secret("admin-secret")
    );
    let gw = start(&cfg, &[]).await;
    for path in ["/admin/policies", "/admin/endpoints"] {
        let r = request_with("GET", &gw.url(path), &[], "").await;
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        assert!(
            !r.text().contains("version"),
            "reveals nothing: {}",
            r.text()
        );
        let r = request_with(
            "GET",
            &gw.url(path),
            &[("authorization", "Bearer wrong")],
            "",
        )
        .await;
        assert_eq!(r.status, 401);
        let r = request_with(
            "GET",
            &gw.url(path),
            &[("authorization", "Bearer admin-secret")],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let r = request_with("POST", &gw.url("/admin/reload"), &[], "").await;
    assert_eq!(r.status, 401);
    // The policies view shows no absolute host path.
    let r = request_with(
        "GET",
        &gw.url("/admin/policies"),
        &[("authorization", "Bearer admin-secret")],
        "",
    )
    .await;
    let dir = gw._dir.path().display().to_string();
    assert!(!r.text().contains(&dir), "{}", r.text());
    // /metrics: loopback is outside 10.0.0.0/8.
    let r = request_with("GET", &gw.url("/metrics"), &[], "").await;
    assert_eq!(r.status, 403, "{}", r.text());
    // Client requests need no admin key (auth.mode none).
    assert_eq!(call(&gw, "m", &[]).await.status, 200);
}

#[tokio::test]
async fn metrics_allow_list_and_a_separate_admin_listener() {
    let cfg = format!(
        "admin:\n  keys: [ '{}' ]\n  listen: 127.0.0.1:0\n  metrics: {{ allow: [ 127.0.0.1/32, '::1/128' ] }}\n{MOCKS}",
        hash_secret("admin-secret")
    );
    let gw = start(&cfg, &[]).await;
    let admin = gw.app.admin_addr().expect("an admin listener");
    // The main listener no longer serves the operator endpoints.
    let r = request_with("GET", &gw.url("/metrics"), &[], "").await;
    assert_eq!(r.status, 404);
    let r = request_with(
        "GET",
        &gw.url("/admin/policies"),
        &[("authorization", "Bearer admin-secret")],
        "",
    )
    .await;
    assert_eq!(r.status, 404);
    // The admin listener does, and only them.
    let r = request_with("GET", &format!("http://{admin}/metrics"), &[], "").await;
    assert_ne!(r.status, 403, "loopback is allowed: {}", r.text());
    let r = request_with(
        "GET",
        &format!("http://{admin}/admin/endpoints"),
        &[("authorization", "Bearer admin-secret")],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request_with(
        "POST",
        &format!("http://{admin}/v1/chat/completions"),
        &[],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 404);
}
