//! The layering of the hub's and the agent's modules, held against the code's own `crate::…` paths.
//!
//! Each crate's top-level modules sit in layers, listed from the top down. A module may use any module
//! of a lower layer; inside one layer only the directions listed in `sideways` are allowed, and
//! nothing points up. Today's uses against that are listed in `exceptions`, each with why it is still
//! there: the test fails on any other (naming file and line) and on an exception that no longer
//! occurs, so the list only shrinks as modules move. Only the source text is read: nothing of the hub
//! or the agent is linked into this test.

mod imports;

use std::fs;
use std::path::{Path, PathBuf};

use imports::{FileContext, Reference, references};

/// One crate's layering.
struct Layering {
    /// The crate's source folder, from the workspace root.
    source: &'static str,
    /// The library's crate name, with which the binary's `main.rs` names it.
    library: &'static str,
    /// Named layers from the top down, each with its top-level modules (`main` is the binary's
    /// `main.rs`, `lib` the items of the crate root itself).
    layers: &'static [(&'static str, &'static [&'static str])],
    /// Uses allowed between two modules of one layer, `(from, to)`: the one direction in which they
    /// may call each other.
    sideways: &'static [(&'static str, &'static str)],
    /// Today's uses against the layering, `(from, to, why it is still there)`.
    exceptions: &'static [(&'static str, &'static str, &'static str)],
}

/// The hub: the binary, the composition root, the HTTP edge, the services, their support, the store,
/// the domain. Of the services, `settings`, `auth` and `cluster` use no other service.
const HUB: Layering = Layering {
    source: "hub/src",
    library: "banhub",
    layers: &[
        ("binary", &["main"]),
        ("composition", &["app"]),
        ("http", &["ui", "api", "serve"]),
        (
            "services",
            &[
                "rollouts",
                "fleet_jails",
                "timed_bans",
                "previews",
                "lookups",
                "profiles",
                "config_changes",
                "backup",
                "sharing",
                "defence",
                "protected",
                "fleet",
                "alerts",
                "feeds",
                "events",
                "settings",
                "auth",
                "cluster",
            ],
        ),
        ("support", &["config", "hub_addresses", "pki", "metrics"]),
        ("store", &["store"]),
        ("domain", &["domain"]),
        ("root", &["lib"]),
    ],
    sideways: &[
        ("ui", "serve"),
        ("api", "serve"),
        ("fleet_jails", "fleet"),
        ("timed_bans", "fleet"),
        ("timed_bans", "auth"),
        ("previews", "fleet"),
        ("protected", "fleet"),
        ("protected", "auth"),
        ("protected", "cluster"),
        ("fleet", "events"),
        ("fleet", "settings"),
        ("fleet", "cluster"),
        ("defence", "alerts"),
        ("alerts", "events"),
        ("rollouts", "profiles"),
        ("rollouts", "config_changes"),
        ("rollouts", "fleet"),
        ("profiles", "fleet"),
        ("profiles", "alerts"),
        ("config_changes", "fleet"),
        ("sharing", "fleet"),
        ("sharing", "events"),
        ("sharing", "defence"),
        ("alerts", "settings"),
        ("feeds", "events"),
        ("events", "cluster"),
        ("hub_addresses", "config"),
        ("lookups", "alerts"),
        ("lookups", "settings"),
    ],
    exceptions: &[],
};

/// The agent: the binary, the session to the hub, what the session drives, the drivers of fail2ban's
/// files, socket and the spool, and the agent's own identity and configuration.
const AGENT: Layering = Layering {
    source: "agent/src",
    library: "banhub_agent",
    layers: &[
        ("binary", &["main"]),
        ("session", &["link"]),
        ("features", &["action", "relay", "reconcile", "shared_bans"]),
        ("drivers", &["fail2ban_files", "spool", "fail2ban"]),
        ("foundation", &["enroll", "tls", "config"]),
        ("root", &["lib"]),
    ],
    sideways: &[
        ("action", "relay"),
        ("action", "reconcile"),
        ("relay", "reconcile"),
        ("fail2ban_files", "fail2ban"),
        ("enroll", "tls"),
    ],
    exceptions: &[],
};

#[test]
fn hub_modules_use_only_lower_layers() {
    assert_layered(&HUB);
}

#[test]
fn agent_modules_use_only_lower_layers() {
    assert_layered(&AGENT);
}

fn assert_layered(layering: &Layering) {
    let mut problems = table_problems(layering);
    problems.extend(use_problems(layering));
    assert!(
        problems.is_empty(),
        "{}: {} problem(s) with the layering (the table is in tests/tests/layering/main.rs):\n{}",
        layering.source,
        problems.len(),
        problems.join("\n")
    );
}

/// Mistakes in the table itself: a module listed twice, a sideways pair across layers, an
/// exception the layers allow anyway.
fn table_problems(layering: &Layering) -> Vec<String> {
    let mut problems = Vec::new();
    let mut listed: Vec<&str> = layering
        .layers
        .iter()
        .flat_map(|(_, modules)| modules.iter().copied())
        .collect();
    listed.sort_unstable();
    for pair in listed.windows(2) {
        if pair[0] == pair[1] {
            problems.push(format!("module `{}` is listed in two layers", pair[0]));
        }
    }
    for (from, to) in layering.sideways {
        if layer_of(layering, from).is_none() || layer_of(layering, from) != layer_of(layering, to)
        {
            problems.push(format!(
                "sideways `{from} -> {to}` does not join two modules of one layer"
            ));
        }
    }
    for (from, to, _) in layering.exceptions {
        if allowed(layering, from, to) {
            problems.push(format!(
                "exception `{from} -> {to}` is allowed by the layers anyway: delete it"
            ));
        }
    }
    problems
}

/// Every use against the layering that is not a listed exception, and every exception that no
/// longer occurs.
fn use_problems(layering: &Layering) -> Vec<String> {
    let root = workspace().join(layering.source);
    let mut problems = Vec::new();
    let mut occurs = vec![false; layering.exceptions.len()];
    let mut modules_seen = Vec::new();
    let mut crossings = 0;
    for file in rust_files(&root) {
        let relative = file.strip_prefix(&root).unwrap_or(&file);
        let shown = format!("{}/{}", layering.source, relative.display());
        let module = module_path(relative);
        let module: Vec<&str> = module.iter().map(String::as_str).collect();
        let from = module.first().copied().unwrap_or("lib");
        if layer_of(layering, from).is_none() {
            problems.push(format!(
                "{shown}: module `{from}` has no layer; add it to the table"
            ));
            continue;
        }
        modules_seen.push(from.to_string());
        let library = (module == ["main"]).then_some(layering.library);
        let source =
            fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for reference in references(
            &source,
            FileContext {
                module: &module,
                library,
            },
        ) {
            let to = target(layering, &reference);
            if to == from {
                continue;
            }
            crossings += 1;
            if allowed(layering, from, to) {
                continue;
            }
            if let Some(i) = layering
                .exceptions
                .iter()
                .position(|(f, t, _)| *f == from && *t == to)
            {
                occurs[i] = true;
                continue;
            }
            problems.push(format!(
                "{shown}:{}: `{from}` ({}) uses `{}` of `{to}` ({}), against the layering",
                reference.line,
                layer_name(layering, from),
                reference.path.join("::"),
                layer_name(layering, to),
            ));
        }
    }
    if crossings == 0 {
        // A reader that finds nothing would pass every check above.
        problems.push(format!(
            "no use between two modules found under {}",
            layering.source
        ));
    }
    for ((from, to, _), occurs) in layering.exceptions.iter().zip(occurs) {
        if !occurs {
            problems.push(format!(
                "exception `{from} -> {to}` no longer occurs: delete it from the list"
            ));
        }
    }
    for (_, modules) in layering.layers {
        for module in modules.iter().filter(|m| **m != "lib") {
            if !modules_seen.iter().any(|seen| seen == module) {
                problems.push(format!(
                    "module `{module}` of the table has no file under {}",
                    layering.source
                ));
            }
        }
    }
    problems
}

/// Whether `from` may use `to` without an exception.
fn allowed(layering: &Layering, from: &str, to: &str) -> bool {
    match (layer_of(layering, from), layer_of(layering, to)) {
        (Some(from_layer), Some(to_layer)) if to_layer > from_layer => true,
        (Some(from_layer), Some(to_layer)) if to_layer == from_layer => {
            layering.sideways.contains(&(from, to))
        }
        _ => false,
    }
}

/// The index of `module`'s layer, counted from the top.
fn layer_of(layering: &Layering, module: &str) -> Option<usize> {
    layering
        .layers
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

fn layer_name(layering: &Layering, module: &str) -> &'static str {
    layer_of(layering, module).map_or("no layer", |i| layering.layers[i].0)
}

/// The top-level module a reference lands in: its first segment when that is a module of the table,
/// the crate root's own items (`lib`) otherwise.
fn target<'r>(layering: &Layering, reference: &'r Reference) -> &'r str {
    match reference.path.first() {
        Some(first) if layer_of(layering, first).is_some() => first,
        _ => "lib",
    }
}

/// The module path of a source file from its path under `src`: `store/events.rs` → `store::events`,
/// `store/mod.rs` → `store`, `lib.rs` → the crate root, `main.rs` → `main`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = path.last_mut()
        && let Some(stem) = last.strip_suffix(".rs")
    {
        *last = stem.to_string();
    }
    if path.last().is_some_and(|last| last == "mod") || path == ["lib"] {
        path.pop();
    }
    path
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn module_paths_follow_the_file_layout() {
    let check = |file: &str, expected: &[&str]| {
        assert_eq!(module_path(Path::new(file)), expected, "{file}")
    };
    check("store/events.rs", &["store", "events"]);
    check("store/mod.rs", &["store"]);
    check(
        "store/migration/m0002_events.rs",
        &["store", "migration", "m0002_events"],
    );
    check("lib.rs", &[]);
    check("main.rs", &["main"]);
    check("config.rs", &["config"]);
}

#[test]
fn the_layers_allow_down_and_the_listed_sideways_only() {
    assert!(allowed(&HUB, "api", "fleet"));
    assert!(allowed(&HUB, "fleet", "domain"));
    assert!(allowed(&HUB, "fleet", "events"));
    assert!(
        !allowed(&HUB, "events", "fleet"),
        "sideways is one direction"
    );
    assert!(!allowed(&HUB, "store", "auth"), "up");
    assert!(
        !allowed(&HUB, "nowhere", "domain"),
        "a module without a layer"
    );
}
