package config

import (
	"errors"
	"fmt"
	"io"
)

// PrintProblems writes the outcome of [Load] as `flexway validate` shows
// it, one finding a line: each warning as "file:line: warning: path:
// message", then each error as "error: file:line: path: message". err is
// Load's error: [Problems] print one line each, any other error (the file
// cannot be read) prints as "error: message". Errors of w are ignored, as
// for any terminal output.
func PrintProblems(w io.Writer, warnings Problems, err error) {
	for _, p := range warnings {
		fmt.Fprintln(w, p.Error())
	}
	if err == nil {
		return
	}
	var ps Problems
	if !errors.As(err, &ps) {
		fmt.Fprintln(w, "error:", err)
		return
	}
	for _, p := range ps {
		fmt.Fprintln(w, "error:", p.Error())
	}
}
