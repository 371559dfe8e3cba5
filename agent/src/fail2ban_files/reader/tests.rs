//! The reader against config directories written for each case, read as fail2ban 1.0.2 reads them.

use super::*;

/// A config directory from `(relative path, text)` pairs.
fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    dir
}

fn load(files: &[(&str, &str)]) -> (tempfile::TempDir, EffectiveConfig) {
    let d = dir(files);
    let config = ConfigReader::new(d.path()).load().expect("loads");
    (d, config)
}

fn value(config: &EffectiveConfig, section: &str, option: &str) -> Result<String, String> {
    config
        .get(section, option)
        .map(|s| s.value)
        .unwrap_or_else(|| Err("<unset>".to_owned()))
}

#[test]
fn file_order_matches_fail2ban() {
    let (_d, config) = load(&[
        (
            "jail.conf",
            "[INCLUDES]\nbefore = paths.conf\nafter = after.conf\n[j]\nx = conf\n",
        ),
        ("paths.conf", "[DEFAULT]\np = paths\n"),
        ("paths.local", "[DEFAULT]\np = paths-local\n"),
        ("after.conf", "[j]\nx = after\n"),
        ("jail.local", "[j]\nx = local\n"),
        ("jail.d/b.conf", "[j]\nx = b.conf\n"),
        ("jail.d/a.conf", "[j]\nx = a.conf\n"),
        ("jail.d/a.local", "[j]\nx = a.local\n"),
        ("jail.d/.hidden.local", "[j]\nx = hidden\n"),
        ("jail.d/notes.txt", "not config"),
    ]);
    assert_eq!(
        config.files(),
        [
            "paths.conf",
            "paths.local",
            "jail.conf",
            "after.conf",
            "jail.d/a.conf",
            "jail.d/b.conf",
            "jail.local",
            "jail.d/a.local",
        ]
    );
    assert_eq!(value(&config, "j", "x"), Ok("a.local".to_owned()));
    assert_eq!(value(&config, "j", "p"), Ok("paths-local".to_owned()));
    let origin = config.get("j", "x").expect("x").origin;
    assert_eq!((origin.file.as_str(), origin.line), ("jail.d/a.local", 2));
}

#[test]
fn include_cycles_and_missing_includes_are_harmless() {
    let (_d, config) = load(&[
        (
            "jail.conf",
            "[INCLUDES]\nbefore = a.conf\n  missing.conf\n[j]\nx = 1\n",
        ),
        (
            "a.conf",
            "[INCLUDES]\nbefore = jail.conf\n[DEFAULT]\ny = 2\n",
        ),
    ]);
    assert_eq!(config.files(), ["a.conf", "jail.conf"]);
    assert_eq!(value(&config, "j", "y"), Ok("2".to_owned()));
}

#[test]
fn interpolation_follows_python() {
    let (d, config) = load(&[
        (
            "jail.conf",
            "[DEFAULT]\n\
                 a = 1\n\
                 Port = 22\n\
                 action_ = %(banaction)s[port=\"%(port)s\"]\n\
                 action = %(action_)s\n\
                 banaction = iptables\n\
                 filter = %(__name__)s[mode=%(mode)s]\n\
                 mode = normal\n\
                 loop = %(loop)s\n\
                 [Foo]\n\
                 bar = x\n\
                 [foo]\n\
                 bar = lower\n\
                 [t1]\n\
                 v1 = %(Foo/bar)s\n\
                 v2 = %(foo/bar)s\n\
                 v3 = %(PORT)s\n\
                 v4 = %(default/a)s-%(known/a)s\n\
                 v5 = 100%%\n\
                 v6 = %(nosuch)s\n\
                 v7 = 5%\n\
                 v8 = %(x\n\
                 v9 = %(loop)s\n\
                 v10 = %(foo/a)s\n\
                 v11 = %(default/action_)s[name=%(__name__)s-tcp]\n\
                 port = ssh\n\
                 v12 = %(fail2ban_confpath)s\n",
        ),
        (
            "jail.local",
            "[t1]\nv4 = %(known/v4)s+\nport = %(known/port)s,2222\n",
        ),
    ]);
    let ok = |s: &str| Ok(s.to_owned());
    let cases: [(&str, Result<String, String>); 11] = [
        ("v2", ok("lower")),
        ("v3", ok("ssh,2222")),
        ("v4", ok("1-1+")),
        ("v5", ok("100%")),
        ("v10", ok("1")),
        ("v11", ok("iptables[port=\"ssh,2222\"][name=t1-tcp]")),
        ("filter", ok("t1[mode=normal]")),
        ("action", ok("iptables[port=\"ssh,2222\"]")),
        ("port", ok("ssh,2222")),
        ("v12", ok(&d.path().display().to_string())),
        ("v1", Err(String::new())),
    ];
    for (option, expected) in cases {
        let got = value(&config, "t1", option);
        match expected {
            Ok(v) => assert_eq!(got, Ok(v), "{option}"),
            Err(_) => assert!(got.is_err(), "{option}: {got:?}"),
        }
    }
    let err = |option: &str| value(&config, "t1", option).expect_err(option);
    assert!(
        err("v1").contains("interpolation key 'foo/bar'"),
        "{}",
        err("v1")
    );
    assert_eq!(
        err("v6"),
        "Bad value substitution: option 'v6' in section 't1' contains an interpolation \
             key 'nosuch' which is not a valid option name. Raw value: '%(nosuch)s'"
    );
    assert!(
        err("v7").starts_with("'%' must be followed by"),
        "{}",
        err("v7")
    );
    assert!(err("v8").starts_with("bad interpolation variable reference"));
    assert!(
        err("v9").starts_with("Recursion limit exceeded"),
        "{}",
        err("v9")
    );
}

#[test]
fn default_settings_resolve_across_files() {
    let (_d, config) = load(&[
        (
            "jail.conf",
            "[DEFAULT]\nlocal = 127.0.0.1/8\nignoreip = %(local)s ::1\n[sshd]\nport = 22\n",
        ),
        (
            "jail.d/banhub-defaults.local",
            "[DEFAULT]\nignoreip = %(local)s 192.0.2.1\n",
        ),
    ]);
    let ignoreip = config.default_setting("IgnoreIP").expect("set");
    assert_eq!(ignoreip.origin.file, "jail.d/banhub-defaults.local");
    assert_eq!(
        (ignoreip.origin.line, ignoreip.origin.section.as_str()),
        (2, "DEFAULT")
    );
    assert_eq!(ignoreip.value, Ok("127.0.0.1/8 192.0.2.1".to_owned()));
    assert_eq!(
        config.default_setting("local").map(|s| s.value),
        Some(Ok("127.0.0.1/8".to_owned()))
    );
    assert!(config.default_setting("nosuch").is_none());
}

#[test]
fn jails_resolve_enabled_filter_and_backend() {
    let (_d, config) = load(&[
        (
            "jail.conf",
            "[INCLUDES]\nbefore = paths.conf\n\
                 [DEFAULT]\nenabled = false\nfilter = %(__name__)s[mode=%(mode)s]\nmode = normal\n\
                 backend = auto\nlogpath = /dev/null\n\
                 [sshd]\nbackend = %(sshd_backend)s\nlogpath = %(sshd_log)s\n\
                 [web]\nenabled = yes\nfilter =\n\
                 [odd]\nfilter = a[b\nenabled = %(nope)s\n\
                 [cond?x=1]\nport = 1\n",
        ),
        (
            "paths.conf",
            "[DEFAULT]\nsshd_backend = polling\nsshd_log = /var/log/auth.log\n",
        ),
        ("jail.d/defaults-debian.conf", "[sshd]\nenabled = true\n"),
    ]);
    assert_eq!(config.jail_names(), ["sshd", "web", "odd", "cond"]);
    let sshd = config.jail("sshd").expect("sshd");
    assert!(sshd.enabled);
    assert_eq!(sshd.backend, "polling");
    let filter = sshd.filter.clone().expect("filter");
    assert_eq!(
        (filter.name.as_str(), filter.options.as_deref()),
        ("sshd", Some("mode=normal"))
    );
    assert_eq!(filter.filter_name().expect("valid").as_str(), "sshd");
    assert_eq!(
        sshd.settings["logpath"].value.as_deref(),
        Ok("/var/log/auth.log")
    );
    assert_eq!(
        sshd.settings["enabled"].origin.file,
        "jail.d/defaults-debian.conf"
    );
    assert!(sshd.problems.is_empty(), "{:?}", sshd.problems);

    let web = config.jail("web").expect("web");
    assert!(web.enabled && web.filter.is_none());
    let odd = config.jail("odd").expect("odd");
    assert!(!odd.enabled && odd.filter.is_none());
    assert_eq!(odd.problems.len(), 2, "{:?}", odd.problems);
    let cond = config.jail("cond").expect("cond");
    assert_eq!(
        config.get("cond", "port?x=1").map(|s| s.raw),
        Some("1".to_owned())
    );
    assert_eq!(cond.settings.get("port"), None);
    assert_eq!(
        config.enabled_jails().into_iter().collect::<Vec<_>>(),
        ["sshd", "web"]
    );
    assert!(config.jail("INCLUDES").is_none() && config.jail("nosuch").is_none());
}

#[test]
fn bool_values_follow_fail2ban() {
    for (text, expected) in [
        ("true", true),
        ("True", true),
        ("yes", true),
        ("on", true),
        ("1", true),
        ("false", false),
        ("", false),
        ("y", false),
        ("enabled", false),
    ] {
        assert_eq!(as_bool(text), expected, "{text:?}");
    }
}

#[test]
fn filter_refs_follow_extract_options() {
    type Expected<'a> = Option<(&'a str, Option<&'a str>)>;
    let cases: [(&str, Expected); 6] = [
        ("sshd", Some(("sshd", None))),
        (
            "sshd[mode=aggressive]",
            Some(("sshd", Some("mode=aggressive"))),
        ),
        ("sshd[a=1][b=2] ", Some(("sshd", Some("a=1][b=2")))),
        ("sshd[mode=x", None),
        ("[x]", None),
        ("sshd[x]y", None),
    ];
    for (spec, expected) in cases {
        let got = FilterRef::parse(spec).ok();
        assert_eq!(
            got.as_ref()
                .map(|f| (f.name.as_str(), f.options.as_deref())),
            expected,
            "{spec:?}"
        );
    }
}

#[test]
fn parse_errors_name_the_file_and_line() {
    let d = dir(&[
        ("jail.conf", "[a]\nx = 1\n"),
        ("jail.d/bad.local", "[a]\nbroken\n"),
    ]);
    let err = ConfigReader::new(d.path()).load().expect_err("bad file");
    let text = err.to_string();
    assert!(
        text.contains("jail.d/bad.local") && text.contains("line 2"),
        "{text}"
    );
}

#[test]
fn missing_dir_is_reported() {
    let err = ConfigReader::new("/nonexistent/banhub")
        .load()
        .expect_err("missing");
    assert!(matches!(err, ConfigError::Dir { .. }), "{err}");
}

#[test]
fn filters_and_overrides_are_listed_and_versioned() {
    let d = dir(&[
        ("filter.d/sshd.conf", "[Definition]\nfailregex = x\n"),
        ("filter.d/sshd.local", "[Definition]\nignoreregex = y\n"),
        ("filter.d/mine.local", "[Definition]\nfailregex = z\n"),
        ("filter.d/bad name.conf", ""),
        ("filter.d/.hidden.conf", ""),
        ("filter.d/readme.txt", ""),
        ("jail.d/sshd.local", "[sshd]\nmaxretry = 2\n"),
    ]);
    let reader = ConfigReader::new(d.path());
    let names: Vec<String> = reader
        .list_filters()
        .expect("list")
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, ["mine", "sshd"]);
    let sshd = FilterName::parse("sshd").expect("name");
    let files = reader.filter_files(&sshd).expect("files");
    assert_eq!(files.conf.path, "filter.d/sshd.conf");
    assert_eq!(
        files.local.content.as_deref(),
        Some("[Definition]\nignoreregex = y\n")
    );
    let jail = JailName::parse("sshd").expect("name");
    let view = reader.read_jail(&jail).expect("jail");
    assert_eq!(view.override_file.path, "jail.d/sshd.local");
    assert_eq!(
        view.override_file.version,
        super::super::version::Version::of(Some(b"[sshd]\nmaxretry = 2\n"))
    );
    assert_eq!(
        view.jail.expect("defined").settings["maxretry"]
            .value
            .as_deref(),
        Ok("2")
    );
    let none = reader
        .read_jail(&JailName::parse("other").expect("name"))
        .expect("read");
    assert!(none.jail.is_none() && none.override_file.content.is_none());
}
