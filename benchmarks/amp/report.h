// bench_amp's three outputs of the same results: the terminal table (with the ratio of each
// level's step time to O0's of the same model, and its loss next to O0's), one JSON object per
// configuration per line (--json FILE; every field of RunResult plus the machine and command),
// and a Markdown section appended to a results file (--markdown FILE, or benchmarks/RESULTS.md
// with --record) that says where, when, at which commit and with which exact command the numbers
// were measured. --profile adds the per-op-type time table of each configuration.
//
// Decision: the table and the Markdown come from one function (report_rows), so what the
// terminal shows and what is recorded cannot drift apart.
//
//   std::printf("%s", mg::bench::format_table(results).c_str());
//   mg::bench::write_json_lines("run.jsonl", results, machine, command);
#pragma once
#include <string>
#include <vector>

#include "benchmarks/amp/machine.h"
#include "benchmarks/amp/runner.h"

namespace mg::bench {

// The table's header and one row of cells per result.
std::vector<std::string> report_header();
std::vector<std::vector<std::string>> report_rows(const std::vector<RunResult>& results);

// The aligned terminal table.
std::string format_table(const std::vector<RunResult>& results);
// The profile of each result that has one: op type, direction, calls/step, ms/step, share.
std::string format_profiles(const std::vector<RunResult>& results, int top);

// The arguments as one POSIX shell command that re-runs them: an argument with characters the
// shell treats specially is single-quoted (a ' inside as '\''), an empty one is ''.
std::string shell_command(const std::vector<std::string>& args);
// `text` as one Markdown code span, fenced with more backticks than any run inside it.
std::string markdown_code(const std::string& text);

// One JSON object per result; throws mg::Error when the file cannot be written.
void write_json_lines(const std::string& path, const std::vector<RunResult>& results, const Machine& machine,
                      const std::string& command);
// Appends "## bench_amp, <date>" with the machine, commit, command and the table in Markdown;
// throws mg::Error when the file cannot be written.
void append_markdown(const std::string& path, const std::vector<RunResult>& results, const Machine& machine,
                     const std::string& command, const std::string& note);

}  // namespace mg::bench
