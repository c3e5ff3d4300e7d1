package bearer

import "testing"

func TestToken(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		ok             bool
	}{
		{name: "plain", in: "Bearer sk-acme", want: "sk-acme", ok: true},
		{name: "scheme in any case", in: "bEaReR sk-acme", want: "sk-acme", ok: true},
		{name: "lower case", in: "bearer sk-acme", want: "sk-acme", ok: true},
		{name: "more than one space", in: "Bearer   sk-acme", want: "sk-acme", ok: true},
		{name: "trailing whitespace", in: "Bearer sk-acme \t", want: "sk-acme", ok: true},
		{name: "base64 padding", in: "Bearer dG9rZW4=", want: "dG9rZW4=", ok: true},
		{name: "an operator's key with spaces and other bytes", in: `Bearer adm key; with "odd" bytes, é`, want: `adm key; with "odd" bytes, é`, ok: true},
		{name: "empty", in: ""},
		{name: "scheme only", in: "Bearer"},
		{name: "scheme and spaces", in: "Bearer   "},
		{name: "no space", in: "Bearersk-acme"},
		{name: "tab instead of space", in: "Bearer\tsk-acme"},
		{name: "other scheme", in: "Basic c2stYWNtZQ=="},
		{name: "longer scheme", in: "Bearers sk-acme"},
		{name: "token alone", in: "sk-acme"},
		{name: "leading space", in: " Bearer sk-acme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Token(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Token(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}
