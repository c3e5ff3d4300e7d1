package gateway

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	ipromptlog "github.com/flexway/flexway/interceptors/promptlog"
	"github.com/flexway/flexway/server/config"
	"github.com/flexway/flexway/server/policy"
	"github.com/flexway/flexway/server/promptlog"
	"github.com/flexway/flexway/server/telemetry"
)

// promptLogs are the gateway's prompt logs: one writer per path, shared
// by the policies naming it.
type promptLogs struct {
	set *promptlog.Set
	// byPolicy is the writer of each policy that turns prompt_logging on.
	byPolicy map[string]*promptlog.Writer
	// files are the writers with the names of the policies writing to
	// each, in declaration order, for the metrics.
	files []promptLogFile
}

// promptLogFile is one prompt log file and its policies.
type promptLogFile struct {
	w        *promptlog.Writer
	policies []string
}

// openPromptLogs opens the file of every policy of cfg whose
// prompt_logging is enabled (created 0600 with its directory); nil when
// no policy turns it on. Its error names the policy's key path; on error
// nothing stays open.
func openPromptLogs(cfg *config.Config, log *slog.Logger) (*promptLogs, error) {
	var p *promptLogs
	at := map[string]int{} // cleaned absolute path → index in files
	for i, pol := range cfg.AI.Policies {
		l := pol.PromptLogging
		if l == nil || !l.Enabled {
			continue
		}
		if p == nil {
			p = &promptLogs{set: promptlog.NewSet(promptlog.Options{Logger: log}), byPolicy: map[string]*promptlog.Writer{}}
		}
		w, err := p.set.Writer(l.Path)
		if err != nil {
			_ = p.set.Close()
			return nil, fmt.Errorf("ai.policies[%d].prompt_logging.path: %w", i, err)
		}
		p.byPolicy[pol.Name] = w
		key, _ := filepath.Abs(l.Path) // Writer succeeded: Abs does
		if j, ok := at[key]; ok {
			p.files[j].policies = append(p.files[j].policies, pol.Name)
			continue
		}
		at[key] = len(p.files)
		p.files = append(p.files, promptLogFile{w: w, policies: []string{pol.Name}})
	}
	return p, nil
}

// interceptor is the prompt-log interceptor's configuration over the
// compiled policies; nil when no prompt log is open (then no call is
// logged, and the interceptor is left out).
func (p *promptLogs) interceptor(t *policy.Table) *ipromptlog.Config {
	if p == nil {
		return nil
	}
	return &ipromptlog.Config{Policies: t, Writers: p.byPolicy}
}

// observe registers the prompt logs' dropped and failed counters: one
// series per file, labelled policy with the names of the policies writing
// to it joined by "," (configuration names: bounded).
func (p *promptLogs) observe(m *telemetry.Metrics) error {
	if p == nil {
		return nil
	}
	return m.ObservePromptLogs(func() []telemetry.PromptLogReading {
		out := make([]telemetry.PromptLogReading, len(p.files))
		for i, f := range p.files {
			out[i] = telemetry.PromptLogReading{Policy: strings.Join(f.policies, ","), Dropped: f.w.Dropped(), Failed: f.w.Failed()}
		}
		return out
	})
}

// close writes what the prompt logs hold and closes them.
func (p *promptLogs) close() error {
	if p == nil {
		return nil
	}
	return p.set.Close()
}
