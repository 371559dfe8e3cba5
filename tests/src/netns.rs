//! A fail2ban host in a network namespace of its own, joined to the test's namespace by a veth
//! pair: its fail2ban, the actions fail2ban runs and its agent see only the namespace's
//! firewall, so a test can load rules there (a ban, a rule that cuts the host off from the hub)
//! without touching the machine's own firewall (COMPONENTS.md section 10).
//!
//! [`NetNs::create`] makes the namespace (`ip netns add`), the pair (`ip link add … type veth`)
//! and one /30 of `10.213.0.0/16` for it: the test's end ([`NetNs::hub_ip`], where a hub's agent
//! gateway listens, [`NetNs::hub`]) and the namespace's end ([`NetNs::host_ip`]). Processes run in
//! it through [`NetNs::launcher`] (`nsenter --net=…`, which execs, so the harness's process ids and
//! signals stay those of the programs). Dropping it deletes the pair and the namespace. It needs
//! root, `ip` (iproute2), `nsenter` (util-linux) and `nft` (nftables); a missing one is an error
//! naming `.ci/install-deps`.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

use crate::fail2ban::{Fail2banSandbox, SandboxBuilder};
use crate::fleet::{TestFleet, TestHost};
use crate::hub::HubBuilder;

const INSTALL_HINT: &str =
    "install them with .ci/install-deps (Debian packages `iproute2`, `util-linux`, `nftables`)";
/// /30 networks in `10.213.0.0/16`.
const SUBNETS: u32 = 1 << 14;
/// Namespaces tried before giving up (a taken one is skipped).
const ATTEMPTS: u32 = 64;
/// Tells apart the namespaces of one test process.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace with a veth pair to the test's namespace; deleted when dropped.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    /// The veth end in the test's namespace (its peer goes with it); empty until it is made.
    link: String,
    hub_ip: Ipv4Addr,
    host_ip: Ipv4Addr,
}

impl NetNs {
    /// Creates a namespace with its loopback up and a veth pair to this namespace, each end with
    /// its address of a /30 no other live namespace of the harness holds.
    pub fn create() -> anyhow::Result<Self> {
        require_tools()?;
        let start = std::process::id()
            .wrapping_mul(31)
            .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let mut last = None;
        for attempt in 0..ATTEMPTS {
            let index = start.wrapping_add(attempt) % SUBNETS;
            match Self::create_at(index) {
                Ok(ns) => return Ok(ns),
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .unwrap_or_else(|| anyhow::anyhow!("no attempt made"))
            .context(format!(
                "no free network namespace after {ATTEMPTS} attempts"
            )))
    }

    fn create_at(index: u32) -> anyhow::Result<Self> {
        let name = format!("bhns-{index}");
        // Taken by another test (or left by a killed one): the caller tries the next.
        ip(&["netns", "add", &name])?;
        let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + index * 4;
        // From here on, dropping `ns` removes what was made.
        let mut ns = Self {
            link: String::new(),
            hub_ip: Ipv4Addr::from(base + 1),
            host_ip: Ipv4Addr::from(base + 2),
            name,
        };
        let link = format!("bhv{index}h");
        let peer = format!("bhv{index}n");
        ip(&[
            "link", "add", &link, "type", "veth", "peer", "name", &peer, "netns", &ns.name,
        ])?;
        ns.link = link;
        ip(&["addr", "add", &format!("{}/30", ns.hub_ip), "dev", &ns.link])?;
        ip(&["link", "set", &ns.link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", ns.name.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{}/30", ns.host_ip), "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (`ip netns list`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file, what `nsenter --net=` takes.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// The address of the test's end of the pair: where a hub listens for the namespace's agents.
    pub fn hub_ip(&self) -> IpAddr {
        IpAddr::V4(self.hub_ip)
    }

    /// The address of the namespace's end of the pair: where the hub sees the host's agent from.
    pub fn host_ip(&self) -> IpAddr {
        IpAddr::V4(self.host_ip)
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn launcher(&self) -> Vec<OsString> {
        let mut net = OsString::from("--net=");
        net.push(self.path());
        vec!["nsenter".into(), net, "--".into()]
    }

    /// Runs `program args` inside the namespace to completion (e.g. `nft list ruleset`) and
    /// returns its stdout; a failure is an error carrying stderr.
    pub fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let launcher = self.launcher();
        let output = Command::new(&launcher[0])
            .args(&launcher[1..])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {program} in {}; {INSTALL_HINT}", self.name))?;
        if !output.status.success() {
            bail!(
                "`{program} {}` in {} failed ({}): {}",
                args.join(" "),
                self.name,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The namespace's whole firewall (`nft list ruleset`).
    pub fn ruleset(&self) -> anyhow::Result<String> {
        self.run("nft", &["list", "ruleset"])
    }

    /// `builder` with its agent gateway on [`NetNs::hub_ip`], so the namespace's agents reach it.
    pub fn hub(&self, builder: HubBuilder) -> HubBuilder {
        builder.grpc_ip(self.hub_ip())
    }

    /// Starts a sandbox built by `sandbox` inside the namespace, and its agent inside it too,
    /// enrolled on `fleet`'s hub (started through [`NetNs::hub`]) and online.
    pub async fn add_host<'f>(
        &self,
        fleet: &'f mut TestFleet,
        name: &str,
        sandbox: SandboxBuilder,
        agent_env: &[(&str, &str)],
    ) -> anyhow::Result<&'f TestHost> {
        let sandbox: Fail2banSandbox = sandbox.name(name).launcher(self.launcher()).start()?;
        fleet
            .add_host_under(name, sandbox, agent_env, &self.launcher())
            .await
    }
}

impl Drop for NetNs {
    /// Deleting the test's end of the pair deletes both ends; the namespace goes once its last
    /// process has exited.
    fn drop(&mut self) {
        if !self.link.is_empty() {
            let _ = ip(&["link", "del", &self.link]);
        }
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Runs `ip args`; a failure is an error carrying stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip; {INSTALL_HINT}"))?;
    if !output.status.success() {
        bail!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(())
}

/// Root and the tools; a namespace of one's own cannot be made without them.
fn require_tools() -> anyhow::Result<()> {
    for tool in ["ip", "nsenter", "nft"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            bail!("`{tool}` is missing; {INSTALL_HINT}");
        }
    }
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .context("running id -u")?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        bail!("a network namespace with a veth pair needs root; run the test as root");
    }
    Ok(())
}
