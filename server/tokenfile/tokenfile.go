// Package tokenfile reads a backend's token file (auth type token_file, a
// rotated service-account token): the one reader for the backends that
// send it and for the configuration check that warns about it, so that
// both hold a file to the same rules.
package tokenfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// MaxBytes bounds a token file: 64 KiB.
const MaxBytes = 64 << 10

// Read returns the token held in the file at path, whitespace-trimmed. It
// fails, with an error that names the path and never the content, when the
// file cannot be opened, is not a regular file (a FIFO would block the
// read), is larger than [MaxBytes], holds only whitespace, or holds a byte
// not allowed in a header value
// ([httpguts.ValidHeaderFieldValue]: a control character other than tab).
// Backends call it at every call, so that a rotated token is used at once.
func Read(path string) (string, error) {
	// Stat before opening: opening a FIFO would block.
	if fi, err := os.Stat(path); err != nil {
		return "", err
	} else if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > MaxBytes {
		return "", errors.New("token file " + path + " is over 64KiB")
	}
	token := strings.TrimSpace(string(data))
	switch {
	case token == "":
		return "", errors.New("token file " + path + " is empty")
	case !httpguts.ValidHeaderFieldValue(token):
		return "", errors.New("token file " + path + " holds a character not allowed in a header")
	}
	return token, nil
}

// Check reports, as an error naming path, why the token file at path
// cannot be used now: what [Read] refuses. The token is read and dropped,
// never returned.
func Check(path string) error {
	_, err := Read(path)
	return err
}
