//! `serve`'s settings from three places besides its flags: the config file
//! (`--config`, TOML), `TREELOG_*` environment variables and the defaults.
//!
//! The clap definition of `serve` is the one list of settings: a file key
//! is an option's long name, its environment variable is derived from that
//! name, and a file value is handed to clap as if given on the command line
//! (for the options neither the command line nor the environment set), so
//! that it is parsed and checked (`requires`, `conflicts_with`, value
//! parsers) exactly as a flag is. Precedence: flag > environment > file >
//! default.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory};

use crate::args::Cli;

/// The global options `serve` takes its settings from besides its own
/// (the others, `--json` and `--server`, are of client commands).
const SERVE_GLOBALS: &[&str] = &[
    "data",
    "durability",
    "tls-ca",
    "tls-cert",
    "tls-key",
    "tls-server-name",
];

/// `serve` options that are not settings: neither file keys nor printed.
const NOT_SETTINGS: &[&str] = &["config", "print-config", "help"];

/// The whole command line's definition, `serve`'s options each with its
/// `TREELOG_*` environment variable.
pub(crate) fn command() -> Command {
    Cli::command().mut_subcommand("serve", |serve| {
        serve.mut_args(|a| {
            let Some(long) = a.get_long().map(str::to_owned) else {
                return a;
            };
            if a.get_env().is_some() || NOT_SETTINGS.contains(&long.as_str()) {
                return a;
            }
            // `--help` would show the variables' values: the bridge's NATS
            // URL may hold a password.
            let a = a.env(env_name(&long)).hide_env_values(true);
            // A repeated option's values in one variable.
            if matches!(a.get_action(), ArgAction::Append) {
                a.value_delimiter(',')
            } else {
                a
            }
        })
    })
}

/// `--max-connections` → `TREELOG_MAX_CONNECTIONS`.
fn env_name(long: &str) -> String {
    format!("TREELOG_{}", long.to_uppercase().replace('-', "_"))
}

/// The command line parsed, with `serve --config`'s file applied.
pub(crate) struct Parsed {
    pub matches: ArgMatches,
    /// The settings the file gave (the others it holds were overridden).
    from_file: BTreeSet<String>,
}

/// The process's arguments parsed, with `serve --config`'s file applied.
/// Exits as clap does on a usage error, and with a usage error on a bad
/// config file.
pub(crate) fn parse() -> Parsed {
    parse_from(std::env::args_os().collect())
}

fn parse_from(mut argv: Vec<OsString>) -> Parsed {
    let cmd = command();
    let mut from_file = BTreeSet::new();
    // A lenient first pass, only to find the file and what the command line
    // and environment set: an option's `requires` may be met by the file.
    if let Ok(pre) = cmd.clone().ignore_errors(true).try_get_matches_from(&argv) {
        if let Some(("serve", sm)) = pre.subcommand() {
            if let Some(path) = sm.get_one::<PathBuf>("config") {
                match file_args(&cmd, sm, path) {
                    Ok((keys, extra)) => {
                        from_file = keys;
                        argv.extend(extra);
                    }
                    Err(msg) => cmd.clone().error(ErrorKind::InvalidValue, msg).exit(),
                }
            }
        }
    }
    Parsed {
        matches: cmd.get_matches_from(argv),
        from_file,
    }
}

/// The settings `serve` reads: its options and [`SERVE_GLOBALS`], as
/// built (globals propagated), in the order of `serve --help`.
fn settings(cmd: &Command) -> Vec<Arg> {
    let mut cmd = cmd.clone();
    cmd.build();
    let serve = cmd.find_subcommand("serve").expect("serve is a subcommand");
    serve
        .get_arguments()
        .filter(|a| match a.get_long() {
            Some(long) if a.is_global_set() => SERVE_GLOBALS.contains(&long),
            Some(long) => !NOT_SETTINGS.contains(&long),
            None => false,
        })
        .cloned()
        .collect()
}

/// The config file read and made into `--long=value` arguments for the
/// settings that neither the command line nor the environment gave; with
/// the keys of those settings.
fn file_args(
    cmd: &Command,
    sm: &ArgMatches,
    path: &Path,
) -> Result<(BTreeSet<String>, Vec<OsString>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))?;
    let settings = settings(cmd);
    let mut out = Vec::new();
    let mut keys = BTreeSet::new();
    for (key, value) in &table {
        let Some(arg) = settings.iter().find(|a| a.get_long() == Some(key.as_str())) else {
            return Err(format!(
                "config file {}: unknown key `{key}` (the keys are serve's long \
                 options: see `treelog serve --help`)",
                path.display()
            ));
        };
        let id = arg.get_id().as_str();
        if matches!(
            sm.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        keys.insert(key.clone());
        let bad = |what: &str| {
            format!(
                "config file {}: key `{key}`: expected {what}, found {}",
                path.display(),
                value.type_str()
            )
        };
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(b)) => {
                if *b {
                    out.push(format!("--{key}").into());
                }
            }
            (ArgAction::SetTrue, _) => return Err(bad("true or false")),
            (ArgAction::Append, toml::Value::Array(items)) => {
                for item in items {
                    let v = scalar(item).ok_or_else(|| bad("an array of strings"))?;
                    out.push(format!("--{key}={v}").into());
                }
            }
            (ArgAction::Append, _) => return Err(bad("an array of strings")),
            (_, v) => {
                let v = scalar(v).ok_or_else(|| bad("a string or an integer"))?;
                out.push(format!("--{key}={v}").into());
            }
        }
    }
    Ok((keys, out))
}

/// A string or an integer as clap would see it on the command line.
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `serve --print-config`: the effective settings as TOML, a comment on
/// each saying where it came from, defaults commented out; `None` unless
/// asked for.
pub(crate) fn print_config(p: &Parsed) -> Option<String> {
    let Some(("serve", sm)) = p.matches.subcommand() else {
        return None;
    };
    if !sm.get_flag("print_config") {
        return None;
    }
    let cmd = command();
    let mut text = String::from(
        "# treelog serve: effective settings (flag > TREELOG_* environment > \
         config file > default)\n",
    );
    for arg in settings(&cmd) {
        let long = arg.get_long().expect("settings have a long name");
        let id = arg.get_id().as_str();
        let source = match sm.value_source(id) {
            Some(ValueSource::CommandLine) if p.from_file.contains(long) => "file",
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "env",
            Some(ValueSource::DefaultValue) => "default",
            _ => "unset",
        };
        let value = match arg.get_action() {
            ArgAction::SetTrue => Some(toml::Value::Boolean(sm.get_flag(id))),
            ArgAction::Append => Some(toml::Value::Array(
                raw(sm, id).into_iter().map(toml::Value::String).collect(),
            )),
            _ => raw(sm, id).into_iter().next().map(|v| typed(&arg, v)),
        };
        // Defaults are commented out, so that the output is itself a
        // config file (a default of a cluster-only option would otherwise
        // require --node-id).
        match value {
            Some(v) if source == "default" || source == "unset" => {
                text.push_str(&format!("# {long} = {v}  (default)\n"))
            }
            Some(v) => text.push_str(&format!("{long} = {v}  # {source}\n")),
            None => text.push_str(&format!("# {long} =  (unset)\n")),
        }
    }
    Some(text)
}

fn raw(sm: &ArgMatches, id: &str) -> Vec<String> {
    sm.get_raw(id)
        .map(|vs| vs.map(|v| v.to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// An integer where the option takes one, otherwise a string (a URL with
/// its user and password redacted: the one secret a setting may hold).
fn typed(arg: &Arg, v: String) -> toml::Value {
    use std::any::TypeId;
    let t = arg.get_value_parser().type_id();
    let integer = [
        TypeId::of::<u64>(),
        TypeId::of::<u32>(),
        TypeId::of::<u16>(),
        TypeId::of::<usize>(),
        TypeId::of::<i64>(),
    ]
    .iter()
    .any(|i| t == *i);
    match v.parse::<i64>() {
        Ok(n) if integer => toml::Value::Integer(n),
        _ => toml::Value::String(treelog_bridge::nats::redact_userinfo(&v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_its_environment_variable() {
        let names: Vec<_> = settings(&command())
            .iter()
            .map(|a| {
                (
                    a.get_long().unwrap().to_owned(),
                    a.get_env().map(|e| e.to_owned()),
                )
            })
            .collect();
        assert!(names.len() > 40, "{names:?}");
        for (long, env) in names {
            let env = env.unwrap_or_else(|| panic!("--{long} has no environment variable"));
            assert_eq!(env.to_str(), Some(env_name(&long).as_str()), "--{long}");
        }
    }
}
