//! The administrator password generated at first start is in its file only: the log names the file.

use banhub_tests::HubProcess;

#[tokio::test]
async fn the_generated_admin_password_is_never_logged_only_its_file() {
    let hub = HubProcess::start().expect("hub");
    let path = hub.data_dir().join("initial-admin-password");
    let password = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_owned();
    assert!(
        password.len() >= 16,
        "a weak generated password: {password:?}"
    );

    let mut logs = String::new();
    for name in ["hub.stdout.log", "hub.stderr.log"] {
        let file = hub.dir().join(name);
        logs.push_str(
            &std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display())),
        );
    }
    assert!(
        !logs.contains(&password),
        "the password is in the hub's log"
    );
    assert!(
        logs.contains(&path.display().to_string()),
        "the log does not say where the password is:\n{logs}"
    );
}
