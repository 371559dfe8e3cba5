//! The agent's config editor and filter tests against real fail2ban: the reader compared with
//! fail2ban's own Python reader, validated writes that a real server reloads, refused and
//! rolled-back writes that leave files and server as they were, jail enable/disable, and
//! `fail2ban-regex` filter tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use banhub_agent::fail2ban_files::{
    ConfigEditor, ConfigReader, EditError, EditableFile, EditorSettings, FilterName, FilterSource,
    FilterTestError, JailName, ReloadScope, Stage, Version,
};
use banhub_tests::commands::client_path;
use banhub_tests::fail2ban::Fail2banSandbox;
use tempfile::TempDir;

const STOCK: &str = "/etc/fail2ban";
/// Debian's interpreter, which has the `fail2ban` module (the one on PATH may not).
const PYTHON: &str = "/usr/bin/python3";
const SETTINGS: [&str; 11] = [
    "enabled",
    "filter",
    "logpath",
    "backend",
    "action",
    "banaction",
    "port",
    "maxretry",
    "findtime",
    "bantime",
    "ignoreip",
];

/// Dumps, for every jail section, the settings fail2ban's own `ConfigReader` resolves:
/// `{"jail": {"option": ["ok", value] | ["err", message]}}`.
const PY_DUMP: &str = r#"
import json, sys
from configparser import NoOptionError
from fail2ban.client.configreader import ConfigReader
d, opts = sys.argv[1], sys.argv[2].split(',')
c = ConfigReader(basedir=d)
c.read('jail')
c.merge_defaults({'fail2ban_version': '1.0.2', 'fail2ban_confpath': d.rstrip('/')})
out = {}
for sec in c.sections():
    if sec == 'INCLUDES':
        continue
    row = {}
    for o in opts:
        try:
            row[o] = ['ok', c.get(sec, o)]
        except NoOptionError:
            pass
        except Exception as e:
            row[o] = ['err', str(e)]
    out[sec] = row
print(json.dumps(out))
"#;

type Dump = BTreeMap<String, BTreeMap<String, (String, String)>>;

fn python_dump(dir: &Path) -> Dump {
    let output = Command::new(PYTHON)
        .arg("-c")
        .arg(PY_DUMP)
        .arg(dir)
        .arg(SETTINGS.join(","))
        .output()
        .expect("run Debian's python3 (install fail2ban with .ci/install-deps)");
    assert!(
        output.status.success(),
        "python dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let raw: BTreeMap<String, BTreeMap<String, Vec<String>>> =
        serde_json::from_slice(&output.stdout).expect("json");
    raw.into_iter()
        .map(|(jail, row)| {
            let row = row
                .into_iter()
                .map(|(k, v)| (k, (v[0].clone(), v[1].clone())))
                .collect();
            (jail, row)
        })
        .collect()
}

fn rust_dump(dir: &Path) -> Dump {
    let config = ConfigReader::new(dir).load().expect("load");
    config
        .jail_names()
        .into_iter()
        .map(|jail| {
            let row = SETTINGS
                .iter()
                .filter_map(|o| config.get(jail, o).map(|s| (o.to_string(), s.value)))
                .map(|(o, v)| match v {
                    Ok(v) => (o, ("ok".to_owned(), v)),
                    Err(e) => (o, ("err".to_owned(), e)),
                })
                .collect();
            (jail.to_owned(), row)
        })
        .collect()
}

/// Our reader and fail2ban's agree on every jail and setting (error messages included).
fn assert_same_as_fail2ban(dir: &Path) {
    let python = python_dump(dir);
    let rust = rust_dump(dir);
    assert_eq!(
        python.keys().collect::<Vec<_>>(),
        rust.keys().collect::<Vec<_>>(),
        "jail sections differ for {}",
        dir.display()
    );
    for (jail, row) in &python {
        assert_eq!(&rust[jail], row, "jail {jail} in {}", dir.display());
    }
}

#[test]
fn reader_matches_fail2ban_on_the_stock_config() {
    assert_same_as_fail2ban(Path::new(STOCK));
    let config = ConfigReader::new(STOCK).load().expect("load");
    assert!(
        config.files().starts_with(&[
            "paths-common.conf".to_owned(),
            "paths-debian.conf".to_owned(),
            "jail.conf".to_owned(),
        ]),
        "{:?}",
        config.files()
    );
    // Debian enables sshd in jail.d/defaults-debian.conf only.
    let sshd = config.jail("sshd").expect("sshd");
    assert!(sshd.enabled);
    assert_eq!(
        sshd.settings["enabled"].origin.file,
        "jail.d/defaults-debian.conf"
    );
    let filter = sshd.filter.expect("filter");
    assert_eq!(
        (filter.name.as_str(), filter.options.as_deref()),
        ("sshd", Some("mode=normal"))
    );
    assert_eq!(
        sshd.settings["logpath"].value.as_deref(),
        Ok("/var/log/auth.log")
    );
    assert_eq!(
        sshd.settings["action"].value.as_deref(),
        Ok("iptables-multiport[port=\"ssh\", protocol=\"tcp\", chain=\"<known/chain>\"]")
    );
    let recidive = config.jail("recidive").expect("recidive");
    assert!(!recidive.enabled);
    assert_eq!(recidive.settings["bantime"].value.as_deref(), Ok("1w"));
    assert_eq!(
        recidive.settings["banaction"].value.as_deref(),
        Ok("iptables-allports")
    );
    assert_eq!(
        config.enabled_jails().into_iter().collect::<Vec<_>>(),
        ["sshd"]
    );
    assert!(config.jails().len() > 50);

    let reader = ConfigReader::new(STOCK);
    let filters: Vec<String> = reader
        .list_filters()
        .expect("filters")
        .into_iter()
        .map(String::from)
        .collect();
    assert!(filters.contains(&"sshd".to_owned()) && filters.contains(&"common".to_owned()));
    let sshd_files = reader
        .filter_files(&FilterName::parse("sshd").expect("name"))
        .expect("sshd filter");
    assert!(
        sshd_files
            .conf
            .content
            .as_deref()
            .is_some_and(|c| c.contains("[Definition]"))
    );
    assert_eq!(sshd_files.local.version, Version::Absent);
}

fn write_tree(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().expect("dir");
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }
    dir
}

#[test]
fn reader_matches_fail2ban_on_crafted_configs() {
    let tricky = write_tree(&[
        (
            "jail.conf",
            "[INCLUDES]\nbefore = paths.conf\nafter = late.conf\n\
             [DEFAULT]\nenabled = false\nbanaction = iptables\nport = 0:65535\n\
             action_ = %(banaction)s[port=\"%(port)s\", name=%(__name__)s]\n\
             action = %(action_)s\nfilter = %(__name__)s[mode=%(mode)s]\nmode = normal\n\
             ignoreip = 127.0.0.1/8\n  ::1 ; inline comment\n\n  10.0.0.0/8\n\
             [a]\nport = ssh\nlogpath = %(a_log)s\nmaxretry: 3\n\
             [b]\nenabled = %(b_on)s\naction_ = %(default/action_)s[x=1]\n  %(default/action_)s[x=2]\n\
             [c]\nbantime = %(nosuch)s\nfindtime = 10%\nbackend = %(c/missing)s\n\
             [Upper]\nPort = 1\nMaxRetry = %(PORT)s\n",
        ),
        (
            "paths.conf",
            "[DEFAULT]\na_log = /var/log/a.log\nb_on = yes\n",
        ),
        ("paths.local", "[DEFAULT]\na_log = /var/log/a-local.log\n"),
        ("late.conf", "[c]\nmaxretry = 9\n"),
        (
            "jail.d/10-a.conf",
            "[a]\nenabled = true\nport = %(known/port)s,2222\n",
        ),
        ("jail.d/20-b.local", "[b]\nenabled = false\n"),
        ("jail.local", "[a]\nmaxretry = %(known/maxretry)s0\n"),
    ]);
    assert_same_as_fail2ban(tricky.path());
    let config = ConfigReader::new(tricky.path()).load().expect("load");
    assert_eq!(
        config.get("a", "maxretry").map(|s| s.value),
        Some(Ok("30".to_owned()))
    );
    assert_eq!(
        config.enabled_jails().into_iter().collect::<Vec<_>>(),
        ["a"]
    );

    let sandbox = Fail2banSandbox::start("cfg-reader").expect("sandbox");
    assert_same_as_fail2ban(&sandbox.conf_dir());
}

struct Setup {
    sandbox: Fail2banSandbox,
    editor: ConfigEditor,
    _backups: TempDir,
}

fn setup(name: &str) -> Setup {
    let sandbox = Fail2banSandbox::start(name).expect("sandbox");
    let backups = tempfile::tempdir().expect("backup dir");
    let mut settings = EditorSettings::new(
        sandbox.conf_dir(),
        sandbox.socket_path(),
        client_path(),
        backups.path(),
    );
    // The host policy allows log paths under /var/log only; the sandbox's logs are elsewhere.
    settings.policy.log_prefixes.push(std::env::temp_dir());
    let editor = ConfigEditor::new(settings).expect("editor");
    Setup {
        sandbox,
        editor,
        _backups: backups,
    }
}

fn jail(name: &str) -> JailName {
    JailName::parse(name).expect("jail name")
}

fn filter(name: &str) -> FilterName {
    FilterName::parse(name).expect("filter name")
}

impl Setup {
    fn get(&self, args: &[&str]) -> String {
        self.sandbox.client(args).expect("fail2ban-client")
    }

    fn jail_list(&self) -> String {
        let status = self.get(&["status"]);
        status
            .lines()
            .find_map(|l| l.split_once("Jail list:\t").map(|(_, v)| v.to_owned()))
            .unwrap_or_default()
    }

    fn override_path(&self, jail: &str) -> PathBuf {
        self.sandbox.conf_dir().join(format!("jail.d/{jail}.local"))
    }

    fn version_of(&self, jail: &str) -> Version {
        self.editor
            .reader()
            .jail_override(&self::jail(jail))
            .expect("read")
            .version
    }

    /// Every file name in jail.d and filter.d (temp files would show up here).
    fn dir_listing(&self) -> Vec<String> {
        let mut names = Vec::new();
        for dir in ["jail.d", "filter.d"] {
            if let Ok(entries) = fs::read_dir(self.sandbox.conf_dir().join(dir)) {
                names.extend(
                    entries
                        .flatten()
                        .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy())),
                );
            }
        }
        names.sort();
        names
    }
}

#[tokio::test]
async fn valid_override_is_validated_applied_and_backed_up() {
    let s = setup("cfg-write");
    assert_eq!(s.get(&["get", "testauth", "maxretry"]), "3");

    let first = "[testauth]\n# from banhub\nmaxretry = 7\n";
    let started = Instant::now();
    let report = s
        .editor
        .write_jail_override(&jail("testauth"), first, Version::Absent)
        .await
        .expect("write");
    eprintln!(
        "validated write + reload <jail>: {:?} (validate {:?}, reload {:?})",
        started.elapsed(),
        report.timings.validate,
        report.timings.reload
    );
    assert_eq!(report.reload, ReloadScope::Jail("testauth".to_owned()));
    assert_eq!(report.changes.len(), 1);
    assert_eq!(report.changes[0].previous, Version::Absent);
    assert_eq!(
        report.changes[0].current,
        Version::of(Some(first.as_bytes()))
    );
    assert_eq!(report.running, ["dummyjail", "testauth"]);
    assert_eq!(s.get(&["get", "testauth", "maxretry"]), "7");
    assert_eq!(
        fs::read_to_string(s.override_path("testauth")).expect("file"),
        first
    );
    assert_eq!(
        s.version_of("testauth"),
        Version::of(Some(first.as_bytes()))
    );
    let file = EditableFile::JailOverride(jail("testauth"));
    assert!(s.editor.backups(&file).expect("backups").is_empty());

    // A second edit names the first one's version; the first text is kept as a backup.
    let second = "[testauth]\nmaxretry = 5\nfindtime = 120\n";
    let report = s
        .editor
        .write_jail_override(&jail("testauth"), second, s.version_of("testauth"))
        .await
        .expect("second write");
    assert_eq!(
        report.changes[0].previous,
        Version::of(Some(first.as_bytes()))
    );
    assert_eq!(s.get(&["get", "testauth", "maxretry"]), "5");
    assert_eq!(s.get(&["get", "testauth", "findtime"]), "120");
    let backups = s.editor.backups(&file).expect("backups");
    assert_eq!(backups.len(), 1);
    assert_eq!(fs::read_to_string(&backups[0].path).expect("backup"), first);
    assert_eq!(backups[0].version, Version::of(Some(first.as_bytes())));

    // Writing the same bytes again changes nothing and reloads nothing.
    let report = s
        .editor
        .write_jail_override(&jail("testauth"), second, s.version_of("testauth"))
        .await
        .expect("same write");
    assert!(report.changes.is_empty());
    assert_eq!(report.reload, ReloadScope::NotNeeded);

    // Deleting the override brings back jail.conf's value.
    s.editor
        .delete_jail_override(&jail("testauth"), s.version_of("testauth"))
        .await
        .expect("delete");
    assert!(!s.override_path("testauth").exists());
    assert_eq!(s.get(&["get", "testauth", "maxretry"]), "3");
    assert_eq!(s.dir_listing(), ["filter.d/testauth.conf"]);
}

#[tokio::test]
async fn a_new_jail_can_be_defined_by_its_override() {
    let s = setup("cfg-newjail");
    let logfile = s.sandbox.dir().join("new.log");
    fs::write(&logfile, "").expect("log");
    let text = format!(
        "[newjail]\nenabled = true\nfilter = testauth\nlogpath = {}\nmaxretry = 4\n",
        logfile.display()
    );
    let started = Instant::now();
    let report = s
        .editor
        .write_jail_override(&jail("newjail"), &text, Version::Absent)
        .await
        .expect("write");
    eprintln!(
        "validated write + full reload (new jail): {:?}",
        started.elapsed()
    );
    assert_eq!(report.reload, ReloadScope::All);
    assert_eq!(s.jail_list(), "dummyjail, newjail, testauth");
    assert_eq!(s.get(&["get", "newjail", "maxretry"]), "4");

    // Removing the file removes the jail (a full reload: `reload newjail` would not find it).
    let report = s
        .editor
        .delete_jail_override(&jail("newjail"), Version::of(Some(text.as_bytes())))
        .await
        .expect("delete");
    assert_eq!(report.reload, ReloadScope::All);
    assert_eq!(s.jail_list(), "dummyjail, testauth");
    assert!(!s.override_path("newjail").exists());
}

/// Asserts the override file still holds `expected` (or is absent), no temp file is left,
/// fail2ban answers and runs both jails, and maxretry is `maxretry`.
fn assert_untouched(s: &Setup, expected: Option<&str>, maxretry: &str) {
    match expected {
        Some(text) => assert_eq!(
            fs::read(s.override_path("testauth")).expect("file"),
            text.as_bytes()
        ),
        None => assert!(!s.override_path("testauth").exists()),
    }
    let listing = s.dir_listing();
    assert!(
        listing.iter().all(|n| !n.contains(".banhub-")),
        "temp files left: {listing:?}"
    );
    assert_eq!(s.get(&["ping"]), "Server replied: pong");
    assert_eq!(s.jail_list(), "dummyjail, testauth");
    assert_eq!(s.get(&["get", "testauth", "maxretry"]), maxretry);
}

#[tokio::test]
async fn invalid_overrides_are_refused_with_fail2bans_message() {
    let s = setup("cfg-invalid");
    let good = "[testauth]\nmaxretry = 7\n";
    s.editor
        .write_jail_override(&jail("testauth"), good, Version::Absent)
        .await
        .expect("good write");
    let version = s.version_of("testauth");

    // fail2ban-client -t refuses an unknown filter.
    let err = s
        .editor
        .write_jail_override(&jail("testauth"), "[testauth]\nfilter = nosuch\n", version)
        .await
        .expect_err("unknown filter");
    assert!(matches!(err, EditError::Invalid { .. }), "{err}");
    let messages = err.fail2ban_messages().join("\n");
    assert!(
        messages.contains("Unable to read the filter 'nosuch'"),
        "{messages}"
    );
    assert!(
        !messages.contains(".shadow-"),
        "messages name the live dir: {messages}"
    );
    assert_untouched(&s, Some(good), "7");

    // -t only warns about a bad number; the editor refuses it.
    let err = s
        .editor
        .write_jail_override(&jail("testauth"), "[testauth]\nmaxretry = abc\n", version)
        .await
        .expect_err("bad number");
    assert!(
        err.to_string()
            .contains("Wrong value for 'maxretry' in 'testauth'"),
        "{err}"
    );
    assert_untouched(&s, Some(good), "7");

    // An unknown backend passes -t but would stop every jail at reload.
    let err = s
        .editor
        .write_jail_override(&jail("testauth"), "[testauth]\nbackend = nosuch\n", version)
        .await
        .expect_err("bad backend");
    assert!(err.to_string().contains("unknown backend"), "{err}");
    assert_untouched(&s, Some(good), "7");

    // Bad syntax never reaches fail2ban.
    let err = s
        .editor
        .write_jail_override(&jail("testauth"), "[testauth]\nnot an option\n", version)
        .await
        .expect_err("bad syntax");
    assert!(
        matches!(&err, EditError::BadContent { reason, .. } if reason.contains("line 2")),
        "{err}"
    );
    assert_untouched(&s, Some(good), "7");
}

#[tokio::test]
async fn a_reload_failure_is_rolled_back() {
    let s = setup("cfg-rollback");
    let good = "[testauth]\nmaxretry = 6\n";
    s.editor
        .write_jail_override(&jail("testauth"), good, Version::Absent)
        .await
        .expect("good write");
    // -t does not compile a jail's own failregex; the reload fails on it and the jail stops.
    let bad = "[testauth]\nmaxretry = 2\nfailregex = ^(unclosed <HOST>\n";
    let started = Instant::now();
    let err = s
        .editor
        .write_jail_override(&jail("testauth"), bad, s.version_of("testauth"))
        .await
        .expect_err("broken regex");
    eprintln!("failed write + rollback: {:?}", started.elapsed());
    match &err {
        EditError::RolledBack {
            stage, rollback, ..
        } => {
            assert!(
                matches!(stage, Stage::Reload | Stage::HealthCheck),
                "{stage:?}"
            );
            assert_eq!(
                rollback.restored,
                [EditableFile::JailOverride(jail("testauth"))]
            );
            assert!(rollback.missing_jails.is_empty(), "{rollback:?}");
        }
        other => panic!("expected a rollback, got {other}"),
    }
    let messages = err.fail2ban_messages().join("\n");
    assert!(
        messages.contains("Unable to compile regular expression")
            || messages.contains("unterminated subpattern"),
        "{messages}"
    );
    assert_untouched(&s, Some(good), "6");

    // The same with no previous file: the new file is removed again.
    let err = s
        .editor
        .write_jail_override(
            &jail("dummyjail"),
            "[dummyjail]\nfailregex = ^(x <HOST>\n",
            Version::Absent,
        )
        .await
        .expect_err("broken regex");
    assert!(matches!(err, EditError::RolledBack { .. }), "{err}");
    assert!(!s.sandbox.conf_dir().join("jail.d/dummyjail.local").exists());
    assert_untouched(&s, Some(good), "6");
}

#[tokio::test]
async fn stale_versions_conflict_and_change_nothing() {
    let s = setup("cfg-conflict");
    let first = "[testauth]\nmaxretry = 4\n";
    s.editor
        .write_jail_override(&jail("testauth"), first, Version::Absent)
        .await
        .expect("write");
    // A writer that read the file before the first write still holds "absent".
    let err = s
        .editor
        .write_jail_override(
            &jail("testauth"),
            "[testauth]\nmaxretry = 9\n",
            Version::Absent,
        )
        .await
        .expect_err("stale");
    match err {
        EditError::Conflict { current, file } => {
            assert_eq!(current, Version::of(Some(first.as_bytes())));
            assert_eq!(file.to_string(), "jail.d/testauth.local");
        }
        other => panic!("expected a conflict, got {other}"),
    }
    assert_untouched(&s, Some(first), "4");

    // Two concurrent writers with the same version: exactly one wins.
    let version = s.version_of("testauth");
    let testauth = jail("testauth");
    let (a, b) = tokio::join!(
        s.editor
            .write_jail_override(&testauth, "[testauth]\nmaxretry = 5\n", version),
        s.editor
            .write_jail_override(&testauth, "[testauth]\nmaxretry = 8\n", version),
    );
    let conflicts = [&a, &b]
        .iter()
        .filter(|r| matches!(r, Err(EditError::Conflict { .. })))
        .count();
    assert_eq!(conflicts, 1, "{a:?} {b:?}");
    let winner = if a.is_ok() { "5" } else { "8" };
    assert_eq!(s.get(&["get", "testauth", "maxretry"]), winner);
}

#[tokio::test]
async fn jails_are_disabled_and_enabled_in_one_validated_edit() {
    let s = setup("cfg-enable");
    // Keep a hand-written line in dummyjail's override: it must survive.
    fs::create_dir_all(s.sandbox.conf_dir().join("jail.d")).expect("jail.d");
    fs::write(
        s.override_path("dummyjail"),
        "# mine\n[dummyjail]\nmaxretry = 9\n",
    )
    .expect("write");

    let started = Instant::now();
    let report = s
        .editor
        .set_jails_enabled(&[(jail("dummyjail"), false)])
        .await
        .expect("disable");
    eprintln!("disable one jail (reload <jail>): {:?}", started.elapsed());
    assert_eq!(report.reload, ReloadScope::Jail("dummyjail".to_owned()));
    assert_eq!(s.jail_list(), "testauth");
    assert_eq!(
        fs::read_to_string(s.override_path("dummyjail")).expect("file"),
        "# mine\n[dummyjail]\nenabled = false\nmaxretry = 9\n"
    );
    let config = ConfigReader::new(s.sandbox.conf_dir())
        .load()
        .expect("load");
    assert!(!config.jail("dummyjail").expect("still listed").enabled);

    let started = Instant::now();
    let report = s
        .editor
        .set_jails_enabled(&[(jail("dummyjail"), true)])
        .await
        .expect("enable");
    eprintln!("enable one jail (full reload): {:?}", started.elapsed());
    assert_eq!(report.reload, ReloadScope::All);
    assert_eq!(s.jail_list(), "dummyjail, testauth");
    assert_eq!(s.get(&["get", "dummyjail", "maxretry"]), "9");

    // Both at once, then both back: one reload each.
    let both = [(jail("testauth"), false), (jail("dummyjail"), false)];
    let report = s
        .editor
        .set_jails_enabled(&both)
        .await
        .expect("disable both");
    assert_eq!(report.changes.len(), 2);
    assert_eq!(report.reload, ReloadScope::All);
    assert_eq!(s.jail_list(), "");
    let both = [(jail("testauth"), true), (jail("dummyjail"), true)];
    s.editor
        .set_jails_enabled(&both)
        .await
        .expect("enable both");
    assert_eq!(s.jail_list(), "dummyjail, testauth");

    // Already in the asked state: nothing to write.
    let report = s
        .editor
        .set_jails_enabled(&[(jail("testauth"), true)])
        .await
        .expect("no-op");
    assert!(report.changes.is_empty());

    // An unknown jail refuses the whole batch.
    let before = s.dir_listing();
    let err = s
        .editor
        .set_jails_enabled(&[(jail("testauth"), false), (jail("nosuch"), true)])
        .await
        .expect_err("unknown jail");
    assert!(matches!(err, EditError::UnknownJail(_)), "{err}");
    assert_eq!(s.dir_listing(), before);
    assert_eq!(s.jail_list(), "dummyjail, testauth");
    let err = s
        .editor
        .set_jails_enabled(&[(jail("testauth"), false), (jail("testauth"), true)])
        .await
        .expect_err("contradiction");
    assert!(matches!(err, EditError::ContradictoryJail(_)), "{err}");
}

#[tokio::test]
async fn enabling_a_jail_whose_filter_is_broken_is_refused() {
    let s = setup("cfg-brokenfilter");
    s.editor
        .set_jails_enabled(&[(jail("dummyjail"), false)])
        .await
        .expect("disable");
    // Break the filter dummyjail will use, behind the editor's back.
    let local = s.sandbox.conf_dir().join("filter.d/broken.conf");
    fs::write(&local, "[Definition]\nfailregex = ^(unclosed <HOST>\n").expect("write");
    let override_text = "[dummyjail]\nenabled = false\nfilter = broken\n";
    s.editor
        .write_jail_override(&jail("dummyjail"), override_text, s.version_of("dummyjail"))
        .await
        .expect("disabled jails may name any filter that exists");
    let err = s
        .editor
        .set_jails_enabled(&[(jail("dummyjail"), true)])
        .await
        .expect_err("broken filter");
    assert!(matches!(err, EditError::Invalid { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("Unable to compile regular expression"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(s.override_path("dummyjail")).expect("file"),
        override_text
    );
    assert_eq!(s.jail_list(), "testauth");
}

#[tokio::test]
async fn filters_are_written_through_the_same_safe_path() {
    let s = setup("cfg-filter");
    let name = filter("testauth");
    let local = "[Definition]\nfailregex = ^\\s*Denied \\S+ from <HOST>$\n";
    let started = Instant::now();
    let report = s
        .editor
        .write_filter(&name, local, Version::Absent)
        .await
        .expect("write filter");
    eprintln!(
        "validated filter write + full reload: {:?}",
        started.elapsed()
    );
    assert_eq!(report.reload, ReloadScope::All);
    let regex = s.get(&["get", "testauth", "failregex"]);
    assert!(regex.contains("Denied"), "{regex}");
    let files = s.editor.reader().filter_files(&name).expect("files");
    assert_eq!(files.local.content.as_deref(), Some(local));

    // A regex that does not compile is refused before anything changes.
    let err = s
        .editor
        .write_filter(
            &name,
            "[Definition]\nfailregex = ^(unclosed <HOST>\n",
            files.local.version,
        )
        .await
        .expect_err("bad regex");
    assert!(matches!(err, EditError::Invalid { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("Unable to compile regular expression"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(s.sandbox.conf_dir().join("filter.d/testauth.local")).expect("file"),
        local
    );
    assert!(s.get(&["get", "testauth", "failregex"]).contains("Denied"));
    assert_eq!(s.jail_list(), "dummyjail, testauth");

    // Includes reach filter.d only.
    let err = s
        .editor
        .write_filter(
            &name,
            "[INCLUDES]\nbefore = ../jail.conf\n",
            files.local.version,
        )
        .await
        .expect_err("escape");
    assert!(matches!(err, EditError::BadContent { .. }), "{err}");
}

#[tokio::test]
async fn path_tricks_are_refused_and_change_nothing() {
    let s = setup("cfg-paths");
    for bad in [
        "../jail",
        "/etc/passwd",
        "..",
        "a/b",
        "sshd\n[DEFAULT]",
        "",
        ".hidden",
    ] {
        assert!(JailName::parse(bad).is_err(), "{bad:?}");
        assert!(FilterName::parse(bad).is_err(), "{bad:?}");
    }
    let before = s.dir_listing();
    let cases = [
        "[DEFAULT]\nbantime = 1\n",
        "[testauth]\nmaxretry = 2\n[dummyjail]\nenabled = false\n",
        "[INCLUDES]\nbefore = /etc/shadow\n",
        "[testauth]\nmaxretry = 2\x00\n",
    ];
    for text in cases {
        let err = s
            .editor
            .write_jail_override(&jail("testauth"), text, Version::Absent)
            .await
            .expect_err(text);
        assert!(
            matches!(err, EditError::BadContent { .. }),
            "{text:?}: {err}"
        );
    }
    let huge = format!("[testauth]\n{}", "# padding\n".repeat(10_000));
    let err = s
        .editor
        .write_jail_override(&jail("testauth"), &huge, Version::Absent)
        .await
        .expect_err("huge");
    assert!(matches!(err, EditError::BadContent { .. }), "{err}");
    for text in [
        "[testauth]\nfilter = ../../../etc/x\n",
        "[testauth]\naction = ../../x[a=b]\n",
    ] {
        let err = s
            .editor
            .write_jail_override(&jail("testauth"), text, Version::Absent)
            .await
            .expect_err(text);
        assert!(matches!(err, EditError::Invalid { .. }), "{text:?}: {err}");
    }
    assert_eq!(s.dir_listing(), before);
    assert_untouched(&s, None, "3");
}

#[tokio::test]
async fn nothing_is_written_while_fail2ban_is_down() {
    let mut s = setup("cfg-down");
    s.sandbox.stop().expect("stop");
    let err = s
        .editor
        .write_jail_override(
            &jail("testauth"),
            "[testauth]\nmaxretry = 2\n",
            Version::Absent,
        )
        .await
        .expect_err("down");
    assert!(matches!(err, EditError::Unavailable(_)), "{err}");
    assert!(!s.override_path("testauth").exists());
}

fn log_lines() -> Vec<String> {
    [
        "2026-11-22 10:00:00 Failed login for bob from 192.0.2.1",
        "2026-11-22 10:00:01 Accepted login for bob from 192.0.2.1",
        "# comment",
        "2026-11-22 10:00:02 Failed login for eve from 2001:db8::7",
        "garbage",
        "2026-11-22 10:00:03 Failed login for root from 198.51.100.9",
        "2026-11-22 10:00:04 Failed login for root from 192.0.2.1",
    ]
    .iter()
    .map(|l| (*l).to_owned())
    .collect()
}

#[tokio::test]
async fn filter_tests_report_matches_ips_and_hits() {
    let s = setup("cfg-regex");
    let lines = log_lines();
    let started = Instant::now();
    let report = s
        .editor
        .test_filter(&FilterSource::Installed(filter("testauth")), &lines)
        .await
        .expect("test");
    eprintln!(
        "filter test of {} lines: {:?}",
        lines.len(),
        started.elapsed()
    );
    let matched: Vec<usize> = report.matched.iter().map(|m| m.index).collect();
    assert_eq!(matched, [0, 3, 5, 6]);
    assert_eq!(report.matched[2].line, lines[5]);
    assert_eq!(report.missed, [1, 4]);
    assert_eq!(report.skipped, [2]);
    let ips: Vec<String> = report.ips.iter().map(ToString::to_string).collect();
    assert_eq!(ips, ["192.0.2.1", "2001:db8::7", "198.51.100.9"]);
    assert_eq!(report.failregex.len(), 1);
    assert_eq!(report.failregex[0].hits, 4);
    assert_eq!(
        (
            report.counts.lines,
            report.counts.matched,
            report.counts.missed
        ),
        (6, 4, 2)
    );

    // An edited .local: the live filter.d is not touched.
    let edited = FilterSource::Edited {
        name: filter("testauth"),
        // The second failregex is a continuation line: indented.
        local: "[Definition]\nfailregex = ^\\s*Accepted login for \\S+ from <HOST>$\n  \
                ^\\s*Failed login for eve from <HOST>$\nignoreregex = from 198\\.51\\.\n"
            .to_owned(),
    };
    let report = s.editor.test_filter(&edited, &lines).await.expect("edited");
    assert_eq!(
        report.matched.iter().map(|m| m.index).collect::<Vec<_>>(),
        [1, 3]
    );
    assert_eq!(
        report.failregex.iter().map(|r| r.hits).collect::<Vec<_>>(),
        [1, 1]
    );
    assert!(
        !s.sandbox
            .conf_dir()
            .join("filter.d/testauth.local")
            .exists()
    );

    // A filter text of its own that includes an installed file.
    fs::write(
        s.sandbox.conf_dir().join("filter.d/common.conf"),
        "[DEFAULT]\n_prefix = \\s*Failed login for\n",
    )
    .expect("common");
    let text = FilterSource::Text(
        "[INCLUDES]\nbefore = common.conf\n[Definition]\nfailregex = ^%(_prefix)s root from <HOST>$\n\
         datepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n"
            .to_owned(),
    );
    let report = s.editor.test_filter(&text, &lines).await.expect("text");
    assert_eq!(
        report.matched.iter().map(|m| m.index).collect::<Vec<_>>(),
        [5, 6]
    );
    assert_eq!(report.ips.len(), 2);

    // No lines: an empty report. A broken filter: fail2ban's message.
    let report = s
        .editor
        .test_filter(&FilterSource::Installed(filter("testauth")), &[])
        .await
        .expect("empty");
    assert!(report.matched.is_empty() && report.counts.lines == 0);
    let err = s
        .editor
        .test_filter(
            &FilterSource::Text("[Definition]\nfailregex = ^(x <HOST>\n".to_owned()),
            &lines,
        )
        .await
        .expect_err("broken");
    assert!(
        matches!(&err, FilterTestError::Rejected { messages } if messages.join("\n").contains("Unable to compile")),
        "{err}"
    );
    let err = s
        .editor
        .test_filter(&FilterSource::Installed(filter("nosuch")), &lines)
        .await
        .expect_err("missing");
    assert!(matches!(err, FilterTestError::UnknownFilter(_)), "{err}");
    let err = s
        .editor
        .test_filter(
            &FilterSource::Installed(filter("testauth")),
            &["two\nlines".to_owned()],
        )
        .await
        .expect_err("newline");
    assert!(
        matches!(err, FilterTestError::BadLine { index: 0, .. }),
        "{err}"
    );
}
