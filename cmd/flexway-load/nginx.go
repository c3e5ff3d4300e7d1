package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"
)

const (
	// nginxStartTimeout bounds how long nginx may take to accept a
	// connection after it has been started.
	nginxStartTimeout = 10 * time.Second
	// debianNginx is where Debian's nginx package installs the binary; it
	// is tried when nginx is not on PATH (/usr/sbin is not on every user's).
	debianNginx = "/usr/sbin/nginx"
)

// findNginx returns the nginx binary: on PATH, else Debian's. It returns
// an error saying it is absent when neither exists.
func findNginx() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(debianNginx); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return debianNginx, nil
	}
	return "", errors.New("no nginx on PATH nor at " + debianNginx)
}

// nginxConfig is the minimal nginx.conf of the nginx path: one worker, one
// server on listen (%[2]s) proxying everything to upstream (%[3]s) over
// kept-alive HTTP/1.1 connections without buffering, every file it writes
// (pid, error and access logs, temp paths) under its prefix (%[1]s, the
// run's temporary directory), and %[4]s the user line when the harness runs
// as root. daemon off is given on the command line (-g), so that the master
// stays the harness's child, in the harness's process group for it.
const nginxConfig = `# Written by flexway-load for one run; removed when the run ends.
%[4]sworker_processes 1;
worker_rlimit_nofile 8192;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    upstream sample {
        server %[3]s;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen %[2]s;
        location / {
            proxy_pass http://sample;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`

// nginxUserLine is the user directive for the config: as root, nginx would
// run its worker as nobody, which may not enter the run's directory (0700);
// the harness's own user keeps it in. Not as root, nginx cannot switch users
// and warns at a user line, so there is none.
func nginxUserLine() string {
	if os.Geteuid() != 0 {
		return ""
	}
	u, err := user.Current()
	if err != nil {
		return ""
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return fmt.Sprintf("user %s;\n", u.Username)
	}
	return fmt.Sprintf("user %s %s;\n", u.Username, g.Name)
}

// startNginx writes nginxConfig into its own directory under dir and starts
// `nginx -p DIR -e DIR/error.log -c nginx.conf -g 'daemon off;'` in its own
// process group, in front of upstream (host:port), on a free loopback port,
// and waits until it accepts a connection.
func startNginx(ctx context.Context, bin, dir, name, upstream string) (*modeProc, error) {
	ndir := filepath.Join(dir, name)
	if err := os.Mkdir(ndir, 0o700); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(nginxConfig, ndir, addr, upstream, nginxUserLine())
	conf := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	// -e: the error log nginx opens before it has read the configuration,
	// which is otherwise PREFIX/logs/error.log or a root-owned path.
	args := []string{"-p", ndir, "-e", filepath.Join(ndir, "error.log"), "-c", conf, "-g", "daemon off;"}
	p, _, err := startProc(ctx, name, bin, dir, args, os.Environ(), false)
	if err != nil {
		return nil, err
	}
	if err := waitDial(ctx, addr, nginxStartTimeout, p.exited); err != nil {
		p.stop()
		b, _ := os.ReadFile(filepath.Join(ndir, "error.log"))
		return nil, fmt.Errorf("%s: %w\n%s\n%s", name, err, p.logTail(), strings.TrimSpace(string(b)))
	}
	return &modeProc{proc: p, addr: addr}, nil
}

// nginxVersion is `nginx -v`'s answer, e.g. "nginx/1.22.1".
func nginxVersion(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-v").CombinedOutput()
	if err != nil {
		return "version unknown"
	}
	_, v, ok := strings.Cut(strings.TrimSpace(string(out)), "version: ")
	if !ok {
		return strings.TrimSpace(string(out))
	}
	return v
}
