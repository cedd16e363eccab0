//! The `spark-connect-guard` program as an operator runs it: how it
//! reaches its upstream through an HTTP CONNECT egress proxy.
//!
//! *Why a harness of its own:* one test needs a real proxy (tinyproxy with
//! basic auth, `scripts/egress-proxy.sh`, started by `.ci/run`, its URL in
//! `SPARK_CONNECT_TEST_EGRESS_PROXY`). Without it that test is reported
//! ignored, not passed; with `SPARK_CONNECT_REQUIRE_REAL=1` (CI) a missing
//! proxy fails it.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use spark_connect_stub::spark::connect::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_testkit::{Fault, Rpc, TestServer};

use support::{assert_exact, channel_to, drain, drain_then, range_sql, sql_request};

const EGRESS: &str = "SPARK_CONNECT_TEST_EGRESS_PROXY";

fn main() {
    let args = Arguments::from_args();
    let proxy = std::env::var(EGRESS).ok();
    let require = std::env::var("SPARK_CONNECT_REQUIRE_REAL").as_deref() == Ok("1");
    let real = Trial::test(
        "the_upstream_stays_exact_through_a_real_egress_proxy_restart",
        {
            let proxy = proxy.clone();
            move || match proxy {
                Some(url) => run(through_a_real_egress_proxy(url)),
                None => Err(format!("{EGRESS} is not set (SPARK_CONNECT_REQUIRE_REAL=1)").into()),
            }
        },
    )
    .with_ignored_flag(proxy.is_none() && !require);
    let trials = vec![
        Trial::test("a_bad_egress_proxy_url_exits_2_naming_no_secret", || {
            run(a_bad_egress_proxy_url())
        }),
        Trial::test("https_proxy_is_honoured_and_the_flags_override_it", || {
            run(https_proxy_and_the_flags())
        }),
        real,
    ];
    libtest_mimic::run(&args, trials).exit();
}

fn run(test: impl std::future::Future<Output = ()>) -> Result<(), Failed> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(test);
    Ok(())
}

/// A running guard program; killed when dropped.
struct GuardProcess {
    child: Child,
    addr: SocketAddr,
    stderr: std::thread::JoinHandle<String>,
}

impl GuardProcess {
    /// Starts the program with `args` and `env` (HTTPS_PROXY and friends
    /// cleared first), and waits for its `listening on` line.
    fn start(args: &[&str], env: &[(&str, &str)]) -> GuardProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spark-connect-guard"));
        for var in [
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
            "NO_PROXY",
            "no_proxy",
            "SPARK_REMOTE",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info,spark_connect_retry=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the guard program starts");
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("a first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
            .parse()
            .expect("an address");
        GuardProcess {
            child,
            addr,
            stderr,
        }
    }

    /// Stops it (SIGKILL) and returns what it logged.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.join().expect("the stderr reader")
    }
}

/// Runs a program to its exit (bounded: 30 s); its status code and stderr.
fn exit_of(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spark-connect-guard"))
        .args(args)
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the guard program starts");
    for _ in 0..300 {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut text = String::new();
            let _ = child
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut text);
            return (status.code(), text);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("the guard program did not exit: {args:?}");
}

async fn a_bad_egress_proxy_url() {
    const SECRET: &str = "hunter2-egress";
    let url = format!("https://alice:{SECRET}@127.0.0.1:3128");
    let (code, stderr) = exit_of(&["--egress-proxy", &url, "sc://127.0.0.1:15002"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("egress proxy"), "{stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");
    // The two flags are one choice.
    let (code, stderr) = exit_of(&[
        "--egress-proxy",
        "http://127.0.0.1:3128",
        "--no-egress-proxy",
        "sc://127.0.0.1:15002",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
}

/// A listener that counts the connections it gets and closes each: a
/// proxy that must (or must not) be dialled.
async fn counting_listener() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(tcp);
        }
    });
    (addr, count)
}

/// Waits (bounded: 10 s) until `count` is above zero.
async fn dialled(count: &AtomicU64) -> bool {
    for _ in 0..1000 {
        if count.load(Ordering::SeqCst) > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

async fn https_proxy_and_the_flags() {
    let server = TestServer::start().await.unwrap();
    let remote = server.remote();
    let (env_proxy, env_dials) = counting_listener().await;
    let (flag_proxy, flag_dials) = counting_listener().await;
    let env_url = format!("http://{env_proxy}");
    let env = [("HTTPS_PROXY", env_url.as_str())];
    let fast = ["--health-interval-ms", "50"];

    // By default the environment's proxy is the way out.
    let guard = GuardProcess::start(&[&fast[..], &[remote.as_str()]].concat(), &env);
    assert!(dialled(&env_dials).await, "HTTPS_PROXY was not used");
    guard.stop();

    // --egress-proxy wins over the environment.
    let flag_url = format!("http://{flag_proxy}");
    env_dials.store(0, Ordering::SeqCst);
    let guard = GuardProcess::start(
        &[&fast[..], &["--egress-proxy", &flag_url, remote.as_str()]].concat(),
        &env,
    );
    assert!(dialled(&flag_dials).await, "--egress-proxy was not used");
    guard.stop();
    assert_eq!(env_dials.load(Ordering::SeqCst), 0, "HTTPS_PROXY was used");

    // --no-egress-proxy: straight to the server, and a query is exact.
    env_dials.store(0, Ordering::SeqCst);
    let guard = GuardProcess::start(
        &[&fast[..], &["--no-egress-proxy", remote.as_str()]].concat(),
        &env,
    );
    let mut client = SparkConnectServiceClient::new(channel_to(guard.addr))
        .max_decoding_message_size(usize::MAX);
    assert_exact(
        &drain(&mut client, sql_request(&range_sql(10_000))).await,
        10_000,
    );
    guard.stop();
    assert_eq!(env_dials.load(Ordering::SeqCst), 0, "HTTPS_PROXY was used");
    server.shutdown().await;
}

/// The proxy's port, from its URL.
fn proxy_port(url: &str) -> &str {
    url.rsplit(':')
        .next()
        .expect("a port")
        .trim_end_matches('/')
}

async fn through_a_real_egress_proxy(url: String) {
    const ROWS: i64 = 200_000;
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(auth, _)| auth.split_once(':'))
        .map(|(_, password)| password.to_owned())
        .expect("the proxy URL has credentials");
    let server = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    // The stream holds still after 20 responses while the proxy restarts.
    server.faults().push(
        Fault::stall(Duration::from_secs(2))
            .on(Rpc::ExecutePlan)
            .after_responses(20),
    );
    let guard = GuardProcess::start(&["--egress-proxy", &url, &server.remote()], &[]);
    let mut client = SparkConnectServiceClient::new(channel_to(guard.addr))
        .max_decoding_message_size(usize::MAX);
    let restart = || {
        let status = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/egress-proxy.sh"
        ))
        .args(["restart", proxy_port(&url)])
        .status()
        .expect("run scripts/egress-proxy.sh");
        assert!(status.success(), "the proxy restarted");
    };
    let out = drain_then(&mut client, sql_request(&range_sql(ROWS)), 10, restart).await;
    assert_exact(&out, ROWS);
    // The cut tunnel was resumed by the guard, not by running it again.
    assert!(server.calls().reattach >= 1, "{:?}", server.calls());
    assert_eq!(server.calls().execute, 1, "{:?}", server.calls());
    let logged = guard.stop();
    assert!(logged.contains("egress proxy"), "{logged}");
    assert!(!logged.contains(&password), "the proxy password was logged");
    server.shutdown().await;
}
