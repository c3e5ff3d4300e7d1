// Package report is `flexway report`: per-tenant chargeback computed from the
// audit file alone, with no other tooling and no access to the ledger.
//
// # Input
//
// The audit is JSON Lines, one object per inference call (DESIGN.md, "Audit
// and telemetry"). The report reads time, tenant, agent, backend,
// model_requested, model_served, input_tokens, output_tokens,
// cache_read_tokens and cache_write_tokens (0 when absent: a line written
// before they existed; they are part of input_tokens, so a line whose
// tiers add up to more is malformed), cache and cache_saved_tokens (the
// response cache's verdict, hit, miss or bypass, and for a hit the tokens
// it did not spend; absent, "" and 0, on a call no cache policy selected
// and on a line written before them; any other verdict, a negative
// cache_saved_tokens, or cache_saved_tokens on a line that is no hit is
// malformed), cost_eur,
// usage_estimated and metered_by; every other field, known or not, is
// ignored. cost_eur is a decimal string with exactly nine decimals
// ("0.000024000") and is parsed exactly into int64 nano-euros, never through
// a float, so that the report's totals equal the ledger's to the nano-euro.
//
// Every line in the period counts, whatever its outcome: a refused call
// usually costs 0, but a stream cut by the client or the upstream
// (outcome canceled or upstream_error, usage_estimated true) was charged by
// the ledger on estimated usage, and the report charges it the same.
//
// A malformed line fails the whole report with its file, its line number
// and why ("audit.jsonl:42: cost_eur "0.1": want exactly 9 decimals";
// "audit.jsonl:7: not an audit line: want a JSON object, got "null"";
// a line over 1 MiB): a report that silently skipped lines would no longer
// equal the ledger. With --skip-bad ([Query.SkipBad]) bad lines are left
// out instead, never silently: each is named on stderr (the first 20) and
// their number is in the output, and the totals are those of the good
// lines, exact. The one
// exception is the last line of the live file (--audit PATH itself) when it
// has no terminating newline and does not parse: the gateway is writing it at
// that moment, so it is left out and a warning says so.
//
// # Files
//
// --audit PATH reads PATH and the backups that size-based rotation
// (lumberjack) left beside it: for audit.jsonl, every
// audit-2006-01-02T15-04-05.000.jsonl in the same directory, and its gzip
// form audit-2006-01-02T15-04-05.000.jsonl.gz (decompressed by extension).
// Only names with lumberjack's exact timestamp count, so a hand-made copy
// such as audit-old.jsonl is not read twice. When a backup exists both plain
// and compressed (lumberjack is compressing it at that moment) only the plain
// one is read. A PATH that was rotated between opening it and listing the
// backups is recognised (same file) and not counted twice. Files are read
// in any order and in parallel: totals do not depend on the order.
//
// # Period
//
// --month YYYY-MM is a whole calendar month and --from/--to YYYY-MM-DD are
// whole days, both inclusive, in --tz (default UTC). The ledger rolls days
// and months over in ai.budget.timezone: pass the same zone for the report
// to equal the ledger. The default period is the current month in --tz.
//
// # Output
//
// One row per group (--by, any of tenant, agent, backend, model, metered_by;
// model is model_served, or model_requested when nothing was served), sorted
// by its keys, then a total. Columns: calls, input_tokens, output_tokens,
// cost_eur, then cost_eur split by metered_by into cost_local_eur and
// cost_upstream_eur (they always add up to cost_eur), then estimated_calls and
// cost_estimated_eur: the calls whose usage Flexway estimated because the
// upstream never reported it, and what they cost, then cache_read_tokens
// and cache_write_tokens: how many of input_tokens the providers read from
// and wrote to their prompt caches (last, so that the columns before them
// keep their positions), then cache_hits and cache_saved_tokens: the calls
// answered from Flexway's response cache (counted in calls too, with 0
// input and output tokens and their policy's hit_price in cost_eur) and
// the input plus output tokens of the calls that filled those entries,
// the tokens the hits did not spend (after all the others, for the same
// reason). Euros are exact decimal
// strings with two to nine decimals ("12.50", "0.000024"); in the table
// they are aligned on the decimal point. csv has a header row and a last row
// whose first key column is TOTAL; json is an array of objects whose last
// one has "total": true and no key fields.
package report
