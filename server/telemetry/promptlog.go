package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// PromptLogReading is one prompt log file's counters at a collection.
type PromptLogReading struct {
	// Policy labels the series: the names of the ai.policies writing to
	// the file (a bounded set from the configuration).
	Policy string
	// Dropped counts the entries dropped because the file's queue was
	// full; Failed those that could not be encoded or written.
	Dropped, Failed int64
}

// ObservePromptLogs registers flexway.prompt_log.dropped and
// flexway.prompt_log.failed, read from read at each collection:
// Prometheus exports them as flexway_prompt_log_dropped_total{policy}
// and flexway_prompt_log_failed_total{policy}. A prompt log's lines are
// never a condition of a call: these counters are how an operator learns
// of lines lost. Call it once; read must be safe for concurrent use.
func (m *Metrics) ObservePromptLogs(read func() []PromptLogReading) error {
	if read == nil {
		return errors.New("telemetry: ObservePromptLogs: nil read")
	}
	err := errors.New("telemetry: ObservePromptLogs called twice")
	m.promptLogOnce.Do(func() {
		var dropped, failed metric.Int64ObservableCounter
		dropped, err = m.meter.Int64ObservableCounter("flexway.prompt_log.dropped", metric.WithUnit("{entry}"),
			metric.WithDescription("Prompt log entries dropped because the file's writer was behind (its queue full), by the policies writing to the file; the calls went on."))
		if err != nil {
			return
		}
		failed, err = m.meter.Int64ObservableCounter("flexway.prompt_log.failed", metric.WithUnit("{entry}"),
			metric.WithDescription("Prompt log entries not written because they could not be encoded or the file could not be written, by the policies writing to the file; the calls went on."))
		if err != nil {
			return
		}
		_, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			for _, r := range read() {
				set := metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", r.Policy)))
				o.ObserveInt64(dropped, r.Dropped, set)
				o.ObserveInt64(failed, r.Failed, set)
			}
			return nil
		}, dropped, failed)
		if err != nil {
			err = fmt.Errorf("telemetry: prompt logs: %w", err)
		}
	})
	return err
}
