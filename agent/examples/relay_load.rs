//! Drives callbacks through the relay and the spool in one process, for counting the agent's
//! instructions per event under `valgrind --tool=callgrind` (the machine is shared, so wall-clock
//! figures would say little; instruction counts repeat).
//!
//! `cargo run --release -p banhub-agent --example relay_load -- EVENTS [CLIENTS] [deliver]`
//!
//! With `deliver`, the stored events are then also taken from the spool in batches, turned into
//! the protocol's messages as the session sends them and acknowledged (no hub: gRPC encoding and
//! TLS are left out), which adds the delivery side's cost per event.
//!
//! The relay and its spool run on a two-worker runtime as in the agent; the clients run on the main
//! thread's own current-thread runtime, so `--separate-threads=yes` tells their instructions
//! (thread 1) from the agent's (every other thread). Running it with two event counts and taking the
//! difference leaves out start-up. Bodies look like the ingest bench's: an sshd ban with one to three
//! log lines and the time, duration and count.

use std::time::Duration;

use banhub_agent::link::delivery::to_wire;
use banhub_agent::relay::{LoopbackAddr, Relay, RelaySecret};
use banhub_agent::spool::{Spool, SpoolConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let clients: usize = args.next().map_or(Ok(16), |a| a.parse())?;
    let deliver = args.next().is_some_and(|a| a == "deliver");
    let dir = tempfile::TempDir::new()?;

    let agent = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let secret = RelaySecret::generate();
    let token = secret.expose().to_owned();
    let shutdown = CancellationToken::new();
    let (addr, spool, served) = agent.block_on(async {
        let spool = Spool::open(dir.path().join("spool"), SpoolConfig::default()).await?;
        let listener = LoopbackAddr::new("127.0.0.1:0".parse()?)?.bind().await?;
        let addr = listener.local_addr()?;
        let relay = Relay::new(spool.clone(), secret);
        let served = tokio::spawn(relay.serve(listener, shutdown.clone()));
        anyhow::Ok((addr, spool, served))
    })?;

    let requests: Vec<Vec<u8>> = (0..64u32)
        .map(|i| {
            let ip = format!("198.51.{}.{}", 100 + i / 32, 1 + i % 200);
            let logs: Vec<String> = (0..1 + i % 3)
                .map(|l| {
                    format!(
                        "Nov 24 06:0{l}:1{i} host sshd[{}]: Failed password for invalid user \
                         admin from {ip} port {} ssh2",
                        4000 + i,
                        40000 + i
                    )
                })
                .collect();
            let body = serde_json::json!({
                "ip": ip, "jail": "sshd", "hostname": "web-1", "failures": 5, "logs": logs,
                "banTime": 1_795_000_000 + i64::from(i), "banDuration": 600, "banCount": 1 + i % 4,
            })
            .to_string();
            format!(
                "POST /api/ban HTTP/1.1\r\nhost: {addr}\r\nx-callback-secret: {token}\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
        .collect();

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    client.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..clients {
            let share = events / clients + usize::from(c < events % clients);
            let requests = requests.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                let mut buf = vec![0u8; 4096];
                for n in 0..share {
                    stream
                        .write_all(&requests[(c + n) % requests.len()])
                        .await?;
                    read_answer(&mut stream, &mut buf).await?;
                }
                anyhow::Ok(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        anyhow::Ok(())
    })?;

    agent.block_on(async {
        let head = spool.head().await?;
        anyhow::ensure!(
            head.position.seq == events as u64,
            "the spool holds {} events, not {events}",
            head.position.seq
        );
        if deliver {
            let mut sent = 0;
            let mut fields = 0usize;
            while sent < head.position.seq {
                let records = spool.pending(sent, 1000).await?;
                let Some(last) = records.last().map(|r| r.seq) else {
                    break;
                };
                let wire: Vec<_> = records.into_iter().map(to_wire).collect();
                fields += wire.iter().map(|e| e.logs.len()).sum::<usize>();
                spool.ack(spool.epoch(), last).await?;
                sent = last;
            }
            anyhow::ensure!(sent == events as u64 && fields > 0, "delivered {sent}");
        }
        shutdown.cancel();
        served.await??;
        spool.close().await;
        anyhow::Ok(())
    })?;
    agent.shutdown_timeout(Duration::from_secs(5));
    println!(
        "{events} callbacks stored through the relay by {clients} clients{}",
        if deliver { ", then delivered" } else { "" }
    );
    Ok(())
}

/// Reads one HTTP/1.1 answer with a `content-length` and checks that it is a 200.
async fn read_answer(stream: &mut TcpStream, buf: &mut [u8]) -> anyhow::Result<()> {
    let mut have = 0;
    loop {
        let n = stream.read(&mut buf[have..]).await?;
        anyhow::ensure!(n > 0, "the relay closed the connection");
        have += n;
        let text = &buf[..have];
        let Some(end) = text.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&text[..end])?.to_ascii_lowercase();
        anyhow::ensure!(head.starts_with("http/1.1 200"), "answer: {head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(Ok(0), |v| v.trim().parse())?;
        if have >= end + 4 + len {
            return Ok(());
        }
    }
}
