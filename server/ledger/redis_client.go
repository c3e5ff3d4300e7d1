package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// quietRedis silences go-redis's own logger, which prints every failed
// dial to stderr: the ledger's errors already say that Redis is down, once
// per call, in the caller's log format.
var quietRedis sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func redisClient(raw string) (*redis.Client, string, error) {
	quietRedis.Do(func() { redis.SetLogger(discardLogger{}) })
	addr := redactURL(raw)
	o, err := redis.ParseURL(raw)
	if err != nil {
		msg := err.Error()
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			msg = ue.Err.Error() // url.Error's text repeats the URL, password included
		}
		msg = strings.ReplaceAll(msg, raw, addr)
		if u, err := url.Parse(raw); err == nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		return nil, "", fmt.Errorf("budget: invalid redis URL %s: %s", addr, msg)
	}
	var q url.Values
	if u, err := url.Parse(raw); err == nil {
		q = u.Query()
	}
	has := q.Has
	if !has("dial_timeout") {
		o.DialTimeout = time.Second
	}
	if !has("read_timeout") {
		o.ReadTimeout = time.Second
	}
	if !has("write_timeout") {
		o.WriteTimeout = time.Second
	}
	if !has("max_retries") {
		o.MaxRetries = -1
	}
	if !has("pool_timeout") {
		o.PoolTimeout = time.Second
	}
	o.DialerRetries = 1
	o.ContextTimeoutEnabled = true
	if o.PoolSize == 0 {
		o.PoolSize = 64
	}
	return redis.NewClient(o), addr, nil
}

// redactURL returns raw with its password replaced by "xxxxx", or a
// placeholder when raw does not parse (it might still hold a password).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL not shown)"
	}
	return u.Redacted()
}
