//! Deploying with the real binary: `serve --config` and its precedence
//! (flag > environment > file > default, seen through --print-config),
//! unknown keys refused, a server started from a file, the example files of
//! deploy/ (the config file loads, the systemd unit verifies), completions
//! and the man page.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use treelog_testkit::cli;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// `treelog ARGS` with `env` added to a copy of the test's environment
/// without any TREELOG_* variable (they would take part in the precedence).
fn treelog(args: &[&str], env: &[(&str, &str)]) -> cli::Ran {
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("TREELOG_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    cli::output(&mut cmd)
}

/// The line of `key` in --print-config's output.
fn setting<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in {printed}"))
}

#[test]
fn a_flag_beats_the_environment_which_beats_the_file_which_beats_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("treelog.toml");
    std::fs::write(
        &file,
        "max-connections = 11\nmax-in-flight = 12\nidle-timeout-secs = 13\n\
         require-tls = true\npeer-tls-name = [\"n1\", \"n2\"]\n\
         data = \"/srv/treelog\"\nbridge-nats = \"nats://user:hunter2@bus:4222\"\n\
         bridge-stream = \"s\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let env = [
        ("TREELOG_MAX_CONNECTIONS", "21"),
        ("TREELOG_MAX_IN_FLIGHT", "22"),
    ];
    let r = treelog(
        &[
            "serve",
            "--config",
            f,
            "--print-config",
            "--max-connections",
            "31",
        ],
        &env,
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let out = &r.stdout;
    assert_eq!(
        setting(out, "max-connections"),
        "max-connections = 31  # flag"
    );
    assert_eq!(setting(out, "max-in-flight"), "max-in-flight = 22  # env");
    assert_eq!(
        setting(out, "idle-timeout-secs"),
        "idle-timeout-secs = 13  # file"
    );
    assert!(
        out.contains("\n# max-frame = 1048576  (default)\n"),
        "{out}"
    );
    assert_eq!(setting(out, "require-tls"), "require-tls = true  # file");
    assert_eq!(
        setting(out, "peer-tls-name"),
        "peer-tls-name = [\"n1\", \"n2\"]  # file"
    );
    assert_eq!(setting(out, "data"), "data = \"/srv/treelog\"  # file");
    // The URL's password is a secret: never printed.
    assert!(!out.contains("hunter2"), "{out}");
    assert_eq!(
        setting(out, "bridge-nats"),
        "bridge-nats = \"nats://<redacted>@bus:4222\"  # file"
    );
    // Nor shown by --help, which names each variable.
    let h = treelog(
        &["serve", "--help"],
        &[("TREELOG_BRIDGE_NATS", "nats://user:hunter2@bus:4222")],
    );
    assert_eq!(h.code(), 0, "{h:?}");
    assert!(h.stdout.contains("TREELOG_BRIDGE_NATS"), "{h:?}");
    assert!(!h.stdout.contains("hunter2"), "{h:?}");
    // What it printed is a config file that loads to the same settings.
    let again = tmp.path().join("printed.toml");
    std::fs::write(&again, out).unwrap();
    let r2 = treelog(
        &[
            "serve",
            "--config",
            again.to_str().unwrap(),
            "--print-config",
        ],
        &[],
    );
    assert_eq!(r2.code(), 0, "{r2:?}");
    assert_eq!(
        setting(&r2.stdout, "max-connections"),
        "max-connections = 31  # file"
    );
    assert_eq!(
        setting(&r2.stdout, "max-in-flight"),
        "max-in-flight = 22  # file"
    );
}

#[test]
fn an_unknown_key_or_a_wrong_type_is_refused_naming_it_and_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.toml");
    let f = file.to_str().unwrap();
    std::fs::write(&file, "listen = \"127.0.0.1:7400\"\nmax_connections = 5\n").unwrap();
    let r = treelog(&["serve", "--config", f, "--print-config"], &[]);
    assert_eq!(r.code(), 2, "{r:?}");
    assert!(r.stderr.contains("unknown key `max_connections`"), "{r:?}");
    assert!(r.stderr.contains(f), "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");

    std::fs::write(&file, "require-tls = \"yes\"\n").unwrap();
    let r = treelog(&["serve", "--config", f, "--print-config"], &[]);
    assert_eq!(r.code(), 2, "{r:?}");
    assert!(r.stderr.contains("key `require-tls`"), "{r:?}");

    // The file's values are checked as flags are.
    std::fs::write(&file, "max-connections = \"many\"\n").unwrap();
    let r = treelog(&["serve", "--config", f, "--print-config"], &[]);
    assert_eq!(r.code(), 2, "{r:?}");
    assert!(r.stderr.contains("many"), "{r:?}");
}

#[test]
fn a_server_started_from_a_config_file_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let file = tmp.path().join("treelog.toml");
    std::fs::write(
        &file,
        format!(
            "data = {:?}\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n\
             durability = \"none\"\n",
            data.to_str().unwrap()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn treelog serve");
    let rpc = cli::ready_rpc(&mut child).to_string();
    let unused = tmp.path().join("unused");
    let r = cli::run(BIN, &unused, &["--server", &rpc, "mkdir", "/from-config"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let r = cli::run(
        BIN,
        &unused,
        &["--server", &rpc, "--json", "stat", "/from-config"],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(r.stdout.contains("from-config"), "{r:?}");
    let _ = child.kill();
    child.wait().unwrap();
    // It served the file's data directory, not the default one.
    assert!(data.join("CURRENT").exists() || data.read_dir().unwrap().next().is_some());
}

/// deploy/treelog.toml loads, and so does each commented-out example in it
/// once uncommented (the replica's apart: it conflicts with a cluster's).
#[test]
fn the_example_config_file_loads_with_its_examples_uncommented() {
    let example = deploy_dir().join("treelog.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let r = treelog(
        &[
            "serve",
            "--config",
            example.to_str().unwrap(),
            "--print-config",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    assert_eq!(
        setting(&r.stdout, "data"),
        "data = \"/var/lib/treelog\"  # file"
    );

    let is_example = |l: &str| {
        l.strip_prefix("# ")
            .and_then(|l| l.split_once(" = "))
            .is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            })
    };
    let replica = |l: &str| l.contains("replica-of") || l.contains("source-token-file");
    let tmp = tempfile::tempdir().unwrap();
    let mut uncommented = 0;
    for want_replica in [false, true] {
        let variant: String = text
            .lines()
            .map(|l| {
                if is_example(l) && replica(l) == want_replica {
                    uncommented += 1;
                    format!("{}\n", &l[2..])
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let file = tmp.path().join("variant.toml");
        std::fs::write(&file, &variant).unwrap();
        let r = treelog(
            &[
                "serve",
                "--config",
                file.to_str().unwrap(),
                "--print-config",
            ],
            &[],
        );
        assert_eq!(r.code(), 0, "{variant}\n{r:?}");
    }
    assert!(uncommented > 15, "{uncommented}");
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(deploy_dir().join("treelog.service")).unwrap();
    for needed in [
        "DynamicUser=yes",
        "StateDirectory=treelog",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "LimitNOFILE=",
        "Restart=on-failure",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "--config /etc/treelog/treelog.toml",
    ] {
        assert!(unit.contains(needed), "{needed} missing from the unit");
    }
    if Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!("systemd-analyze not found: deploy/treelog.service not verified");
        return;
    }
    // verify checks that ExecStart's binary exists: this build's.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("treelog.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/treelog", BIN)).unwrap();
    let r = cli::output(Command::new("systemd-analyze").arg("verify").arg(&copy));
    assert_eq!(r.code(), 0, "{r:?}");
    // Unknown or misspelled keys are only warnings.
    assert!(r.stderr.trim().is_empty(), "{r:?}");
}

#[test]
fn completions_and_the_man_page_come_from_the_cli_definition() {
    let r = treelog(&["completions", "bash"], &[]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(r.stdout.contains("serve"), "{}", r.stdout);
    assert!(r.stdout.contains("--print-config"), "{}", r.stdout);
    let r = treelog(&["man"], &[]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(r.stdout.starts_with(".ie"), "{}", r.stdout);
    // roff escapes each `-` of an option.
    assert!(r.stdout.contains(r"\-\-data"), "{}", r.stdout);
}
