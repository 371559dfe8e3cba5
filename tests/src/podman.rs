//! Podman for the container tests: the images `deploy/container/build-images.sh` builds, containers
//! and volumes removed when their handles are dropped, health checks run on demand, and compose
//! projects taken down with their volumes. Every command runs with `deploy/container/containers.conf`
//! (runc, no default ulimits), as the scripts there do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::process::{LogFiles, run_with_timeout, workspace_root};

/// The prefix of the images `build-images.sh` makes: `<prefix>/hub`, `/agent` and `/postgres`.
pub const IMAGE_PREFIX: &str = "localhost/banhub-ci";

/// How long one podman command may take (image builds have their own limit).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// How long making the base image and building the three images may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// `deploy/container`.
pub fn container_dir() -> PathBuf {
    workspace_root().join("deploy").join("container")
}

/// The full name of one of the images `build-images.sh` makes (`hub`, `agent`, `postgres`).
pub fn image(name: &str) -> String {
    format!("{IMAGE_PREFIX}/{name}:latest")
}

/// Runs podman, or another tool of the container stack, with the repository's containers.conf.
#[derive(Debug)]
pub struct Podman {
    logs: TempDir,
}

impl Podman {
    /// Checks that podman, buildah and podman-compose are installed; an error naming
    /// `.ci/install-deps` when one is not.
    pub fn new() -> anyhow::Result<Self> {
        for tool in ["podman", "buildah", "podman-compose", "mmdebstrap"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            if !found {
                bail!("{tool} is not installed: the container tests need it; run .ci/install-deps");
            }
        }
        let logs = tempfile::Builder::new()
            .prefix("banhub-podman-")
            .tempdir()
            .context("creating a directory for podman's output")?;
        Ok(Self { logs })
    }

    /// Runs `deploy/container/build-images.sh` for the debug binaries and returns what it printed
    /// (the build times and the image sizes).
    pub fn build_images(&self) -> anyhow::Result<String> {
        let mut command = Command::new("bash");
        command.arg(container_dir().join("build-images.sh"));
        let out = self.run_command("build-images", command, BUILD_TIMEOUT)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `podman <args>`, which must succeed; its standard output, trimmed.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.output(args)?;
        if !out.status.success() {
            bail!(
                "podman {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `podman <args>` whatever its status.
    pub fn output(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut command = Command::new("podman");
        command.args(args);
        self.run_command("podman", command, COMMAND_TIMEOUT)
    }

    /// `podman-compose <args>` in `dir` with `env` added, which must succeed.
    pub fn compose(&self, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<()> {
        let mut command = Command::new("podman-compose");
        command
            .args(args)
            .current_dir(dir)
            .envs(env.iter().copied());
        let out = self.run_command("podman-compose", command, BUILD_TIMEOUT)?;
        if !out.status.success() {
            bail!(
                "podman-compose {} failed ({}): {}\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Runs the container's health check now (podman runs it on a timer only under systemd):
    /// `Ok(true)` when it passes, `Ok(false)` when podman reports the container unhealthy, an
    /// error when the check could not run (e.g. the container is not running).
    pub fn health_check(&self, container: &str) -> anyhow::Result<bool> {
        let out = self.output(&["healthcheck", "run", container])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            Ok(true)
        } else if stdout.trim() == "unhealthy" {
            Ok(false)
        } else {
            bail!(
                "podman healthcheck run {container} failed ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        }
    }

    /// The size of `image` in bytes, as podman reports it.
    pub fn image_size(&self, image: &str) -> anyhow::Result<u64> {
        self.run(&["image", "inspect", "--format", "{{.Size}}", image])?
            .parse()
            .context("podman printed no image size")
    }

    /// The container's last log lines, for a failure message.
    pub fn logs(&self, container: &str) -> String {
        match self.output(&["logs", "--tail", "40", container]) {
            Ok(out) => format!(
                "--- {container} ---\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("--- {container}: no logs ({e:#})"),
        }
    }

    fn run_command(
        &self,
        name: &str,
        mut command: Command,
        timeout: Duration,
    ) -> anyhow::Result<Output> {
        command.env("CONTAINERS_CONF", container_dir().join("containers.conf"));
        run_with_timeout(
            name,
            command,
            &LogFiles::new(self.logs.path(), name),
            timeout,
        )
    }
}

/// A container started by the test, removed (with its anonymous volumes) when dropped.
#[derive(Debug)]
pub struct Container<'a> {
    podman: &'a Podman,
    pub name: String,
}

impl<'a> Container<'a> {
    /// `podman run -d --name <name> <args>`.
    pub fn run(podman: &'a Podman, name: &str, args: &[&str]) -> anyhow::Result<Self> {
        // Left over from an interrupted run of the same test.
        podman.output(&["rm", "--force", "--volumes", name])?;
        let mut all = vec!["run", "--detach", "--name", name];
        all.extend_from_slice(args);
        podman.run(&all)?;
        Ok(Self {
            podman,
            name: name.to_owned(),
        })
    }

    /// The container's last log lines.
    pub fn logs(&self) -> String {
        self.podman.logs(&self.name)
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self
            .podman
            .output(&["rm", "--force", "--volumes", "--time", "5", &self.name]);
    }
}

/// A named volume made by the test, removed when dropped (after the containers that use it).
#[derive(Debug)]
pub struct Volume<'a> {
    podman: &'a Podman,
    pub name: String,
}

impl<'a> Volume<'a> {
    pub fn create(podman: &'a Podman, name: &str) -> anyhow::Result<Self> {
        podman.output(&["volume", "rm", "--force", name])?;
        podman.run(&["volume", "create", name])?;
        Ok(Self {
            podman,
            name: name.to_owned(),
        })
    }
}

impl Drop for Volume<'_> {
    fn drop(&mut self) {
        let _ = self.podman.output(&["volume", "rm", "--force", &self.name]);
    }
}

/// A compose project brought up by the test from `deploy/compose.yaml`, taken down with its
/// volumes and network when dropped.
#[derive(Debug)]
pub struct ComposeProject<'a> {
    podman: &'a Podman,
    pub name: String,
    file: PathBuf,
    env: Vec<(String, String)>,
}

impl<'a> ComposeProject<'a> {
    /// `podman-compose -p <name> -f <file> up -d --no-build` with `env` (the variables the file
    /// interpolates).
    pub fn up(
        podman: &'a Podman,
        name: &str,
        file: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let project = Self {
            podman,
            name: name.to_owned(),
            file: file.to_owned(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        // Left over from an interrupted run of the same test.
        project.down();
        project.compose(&["up", "--detach", "--no-build"])?;
        Ok(project)
    }

    /// The container of `service` (podman-compose names them `<project>_<service>_1`).
    pub fn container(&self, service: &str) -> String {
        format!("{}_{service}_1", self.name)
    }

    fn compose(&self, args: &[&str]) -> anyhow::Result<()> {
        let file = self.file.to_string_lossy();
        let mut all = vec!["--project-name", &self.name, "--file", &file];
        all.extend_from_slice(args);
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let dir = self.file.parent().unwrap_or_else(|| Path::new("."));
        self.podman.compose(dir, &all, &env)
    }

    fn down(&self) {
        let _ = self.compose(&["down", "--volumes"]);
        let network = format!("{}_default", self.name);
        let _ = self.podman.output(&["network", "rm", "--force", &network]);
    }
}

impl Drop for ComposeProject<'_> {
    fn drop(&mut self) {
        self.down();
    }
}

/// A port on 127.0.0.1 that was free a moment ago, to publish a container's port on.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .context("finding a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}
