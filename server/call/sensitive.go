package call

import "strings"

// SensitiveValue reports whether header values flag a call sensitive: any
// value, or any comma-separated element of one (HTTP may merge repeated
// headers into one line), that is "1" or "true" in any case, spaces
// trimmed. Every other value flags nothing; none unflags.
func SensitiveValue(values []string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part == "1" || strings.EqualFold(part, "true") {
				return true
			}
		}
	}
	return false
}
