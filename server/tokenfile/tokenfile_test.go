package tokenfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want, wantErr string
	}{
		{name: "token", path: file("t1", "tok-1"), want: "tok-1"},
		{name: "trimmed", path: file("t2", "  tok-2\n"), want: "tok-2"},
		{name: "tab inside", path: file("t3", "a\tb"), want: "a\tb"},
		{name: "at the bound", path: file("t4", strings.Repeat("a", MaxBytes)), want: strings.Repeat("a", MaxBytes)},
		{name: "over the bound", path: file("t5", strings.Repeat("a", MaxBytes+1)), wantErr: "over 64KiB"},
		{name: "empty", path: file("t6", ""), wantErr: "is empty"},
		{name: "only whitespace", path: file("t7", " \n\t"), wantErr: "is empty"},
		{name: "newline inside", path: file("t8", "a\r\nX-Evil: 1"), wantErr: "not allowed in a header"},
		{name: "delete", path: file("t9", "a\x7fb"), wantErr: "not allowed in a header"},
		{name: "missing", path: filepath.Join(dir, "missing"), wantErr: "no such file"},
		{name: "a directory", path: dir, wantErr: "not a regular file"},
		{name: "a FIFO", path: fifo, wantErr: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErr := Check(tc.path)
			got, err := Read(tc.path)
			if tc.wantErr == "" {
				if err != nil || got != tc.want || checkErr != nil {
					t.Fatalf("Read = %.20q, %v; Check = %v; want %.20q", got, err, checkErr, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || checkErr == nil || !strings.Contains(checkErr.Error(), tc.wantErr) {
				t.Fatalf("Read = %.20q, %v; Check = %v; want an error with %q", got, err, checkErr, tc.wantErr)
			}
			if strings.Contains(err.Error(), "X-Evil") || strings.Contains(checkErr.Error(), "X-Evil") {
				t.Errorf("an error repeats the file's content: %v", err)
			}
		})
	}
}
