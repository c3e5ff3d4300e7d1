// Package config reads flexway.yaml into plain Go structs and checks it.
//
// It exists so that the configuration contract (flexway.reference.yaml) is
// decoded, defaulted and validated in exactly one place: `flexway serve` and
// `flexway validate` both call [Load], so validate cannot disagree with the
// server. A file that loads today must load unchanged in every later release;
// testdata/config/compat holds the files that pin that promise.
//
// Loading runs in a fixed order:
//
//  1. strict decode: every key of the file must be a field of [Config]; an
//     unknown key is an error naming its full key path and line
//     (`flexway.yaml:12: unknown key ai.backends.main.timeuot`), and every
//     decode error of the file is reported, not just the first; a section a
//     later release enforces (a policy's guardrails, prompt_logging, cache)
//     is an error saying so ([ErrNotEnforced]), never loaded and ignored;
//  2. defaults (see [Config.ApplyDefaults]); Load applies the field defaults
//     before decoding, so an explicit zero (`timeout: 0s`) stays visible to
//     validation instead of being silently replaced; the defaults that
//     depend on another key (a kind: anthropic backend's api_version and
//     max_output_tokens) are set after decoding, to keys the file does not
//     write;
//  3. relative paths resolved against the directory of the file;
//  4. secrets resolved: API keys, relay keys, server.admin_key,
//     audit.hash_key and backend auth secrets are read once, at load; a
//     token_file is never read here (the backend re-reads it at every call),
//     only opened: one that cannot be is a warning, as it may be mounted
//     later;
//  5. [Config.Validate]: every error and every warning, each with its key path.
//
// Secrets are never written inline: a [Secret] is a reference, "env:NAME" or
// "file:PATH". Money is converted to integer nano-euros (10⁻⁹ €) by the
// methods of [Caps] and [Price]; floats are never accumulated.
//
// The package imports only the standard library and go.yaml.in/yaml/v3, never
// the packages it configures (routing, budget, backends, audit, telemetry):
// they read a *Config, not the other way round.
package config
