package jsonscan

import "testing"

// BenchmarkToolCalls reads an assistant message's two tool calls.
func BenchmarkToolCalls(b *testing.B) {
	raw := `[{"id":"toolu_01","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},{"id":"toolu_02","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]`
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if calls, ok := ToolCalls(raw); !ok || len(calls) != 2 {
			b.Fatal(calls)
		}
	}
}
