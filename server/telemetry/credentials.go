package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// credentialKey identifies one series of flexway.upstream.credential.calls.
type credentialKey struct{ backend, credential, outcome string }

func (m *Metrics) credentialInstrument() error {
	var err error
	m.credentialCalls, err = m.meter.Int64Counter("flexway.upstream.credential.calls",
		metric.WithUnit("{call}"),
		metric.WithDescription("Upstream attempts per key of a backend's credential pool, by outcome: served (2xx), rate_limited (a 429: the key rests), refused (401, 402 or 403: the key is set aside), failed (anything else)."))
	return err
}

// CredentialUsed counts one upstream attempt on a pooled key: backend and
// credential are the configuration's names (ai.backends.NAME and
// credentials.keys[i].name, a bounded set: never a key's value), outcome
// one of server/backends/upstream's Credential* outcomes. The series
// carry labels backend, credential and outcome. Safe for concurrent use;
// a repeated series allocates nothing.
func (m *Metrics) CredentialUsed(backend, credential, outcome string) {
	k := credentialKey{backend, credential, outcome}
	opt, ok := m.credentialSets.Load(k)
	if !ok {
		opt, _ = m.credentialSets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(
			attribute.String("backend", backend), attribute.String("credential", credential), attribute.String("outcome", outcome))))
	}
	m.credentialCalls.Add(context.Background(), 1, opt.(metric.AddOption))
}
