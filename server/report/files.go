package report

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// backupTimeFormat is the timestamp lumberjack puts in a backup's name.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// source is one opened audit file.
type source struct {
	name   string // as shown in messages
	file   *os.File
	gz     bool
	active bool // --audit PATH itself: its last line may be being written
}

// open returns the reader of s's lines, decompressing a .gz file.
func (s *source) open() (io.Reader, func(), error) {
	if !s.gz {
		return s.file, func() {}, nil
	}
	zr, err := gzip.NewReader(s.file)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.name, err)
	}
	return zr, func() { zr.Close() }, nil
}

// isBackup reports whether name is a lumberjack backup of the file whose
// base name is base, and whether it is compressed.
func isBackup(base, name string) (ok, gz bool) {
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	rest, found := strings.CutPrefix(name, prefix)
	if !found {
		return false, false
	}
	if r, found := strings.CutSuffix(rest, ext+".gz"); found {
		rest, gz = r, true
	} else if r, found := strings.CutSuffix(rest, ext); found {
		rest = r
	} else {
		return false, false
	}
	if _, err := time.Parse(backupTimeFormat, rest); err != nil {
		return false, false
	}
	return true, gz
}

// openAudit opens path (if it exists) and its rotated backups. path itself
// is opened first, so that a rotation happening meanwhile leaves at worst
// the same file under a backup's name, which is then recognised and skipped.
// It fails when there is nothing to read.
func openAudit(path string) (srcs []*source, err error) {
	defer func() {
		if err != nil {
			closeAll(srcs)
			srcs = nil
		}
	}()
	var activeInfo os.FileInfo
	f, err := os.Open(path)
	switch {
	case err == nil:
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		if st.IsDir() {
			f.Close()
			return nil, fmt.Errorf("--audit %s is a directory: want the audit file (audit.path)", path)
		}
		activeInfo = st
		gz := strings.HasSuffix(path, ".gz")
		srcs = append(srcs, &source{name: path, file: f, gz: gz, active: !gz})
	case errors.Is(err, fs.ErrNotExist):
		// Only backups, maybe: a rotation just happened, or they were copied.
	default:
		return nil, err
	}

	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return srcs, err
	}
	names := map[string]bool{} // backup name → compressed
	for _, e := range entries {
		if ok, gz := isBackup(base, e.Name()); ok && e.Type().IsRegular() {
			names[e.Name()] = gz
		}
	}
	var backups []string
	for n, gz := range names {
		if gz {
			if _, plain := names[strings.TrimSuffix(n, ".gz")]; plain {
				continue // being compressed right now: the plain file is whole
			}
		}
		backups = append(backups, n)
	}
	sort.Strings(backups)
	for _, n := range backups {
		p := filepath.Join(dir, n)
		gz := names[n]
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) && !gz {
			// Compressed and removed since the listing: read the .gz.
			p, gz = p+".gz", true
			f, err = os.Open(p)
		}
		if err != nil {
			return srcs, err
		}
		if activeInfo != nil {
			if st, err := f.Stat(); err == nil && os.SameFile(st, activeInfo) {
				f.Close() // path, rotated after we opened it
				continue
			}
		}
		srcs = append(srcs, &source{name: p, file: f, gz: gz})
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("no audit file at %s (nor rotated backups beside it)", path)
	}
	return srcs, nil
}

func closeAll(srcs []*source) {
	for _, s := range srcs {
		s.file.Close()
	}
}
