package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// streamBody is the streaming request. The message is long enough that the
// sample's answer splits into all of its --chunks pieces.
var streamBody = []byte(`{"model":"` + sampleModel + `","stream":true,"messages":[{"role":"user","content":"Stream a short greeting to the benchmark harness, word by word."}]}`)

// streamTiming is what one stream measured.
type streamTiming struct {
	FirstByte    time.Duration   // from send to the first byte of the body
	FirstContent time.Duration   // from send to the end of the first content event
	Gaps         []time.Duration // between the arrivals of consecutive paced events
}

// stream sends one streaming request to p and reads it to the end. The
// sample sends a role event at once, then each of its chunks after its
// chunk delay; the chunks gaps between those chunks+1 events are paced by
// the sample, and are what Gaps holds. The events after them (finish, usage,
// [DONE]) arrive together and are not timed.
func (l *load) stream(ctx context.Context, p path, chunks int) (streamTiming, error) {
	req, err := l.newRequest(ctx, p, streamBody)
	if err != nil {
		return streamTiming{}, err
	}
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		return streamTiming{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return streamTiming{}, fmt.Errorf("%s: status %d", p.name, resp.StatusCode)
	}
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	if _, err := r.Peek(1); err != nil {
		return streamTiming{}, fmt.Errorf("%s: no first byte: %w", p.name, err)
	}
	t := streamTiming{FirstByte: time.Since(start)}
	var last time.Time
	events := 0
	for {
		line, err := r.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) {
			now := time.Now()
			if bytes.Equal(bytes.TrimSpace(line), []byte("data: [DONE]")) {
				break
			}
			if events == 1 {
				t.FirstContent = now.Sub(start)
			}
			if events > 0 && events <= chunks {
				t.Gaps = append(t.Gaps, now.Sub(last))
			}
			last = now
			events++
		}
		if errors.Is(err, io.EOF) {
			return t, fmt.Errorf("%s: stream ended without [DONE]", p.name)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return t, err
		}
	}
	if len(t.Gaps) != chunks {
		return t, fmt.Errorf("%s: %d paced events, want %d", p.name, len(t.Gaps), chunks)
	}
	return t, nil
}

// streams runs n streams on p, conc at a time, and returns their timings.
func (l *load) streams(ctx context.Context, p path, n, conc, chunks int) ([]streamTiming, error) {
	out := make([]streamTiming, n)
	errc := make(chan error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range next {
				t, err := l.stream(ctx, p, chunks)
				if err != nil {
					errc <- fmt.Errorf("%s stream %d: %w", p.name, i, err)
					continue
				}
				out[i] = t
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	return out, nil
}

// openStreams opens n streams through p and holds them open; at most
// opening requests are being connected and written at a time, so as not to
// overflow a listen backlog. Once every stream has received its first byte
// it calls ready with the number open, and closes them all when ready
// returns. It returns how many were open and the first error: a stream
// that could not be opened (ready is not called then) or ready's.
func (l *load) openStreams(ctx context.Context, p path, n, opening int, ready func(open int) error) (int, error) {
	hold, release := context.WithCancel(ctx)
	defer release()
	sem := make(chan struct{}, opening)
	opened := make(chan error, n)
	var wg sync.WaitGroup
	openOne := func() {
		var once sync.Once
		written := func() { once.Do(func() { <-sem }) }
		defer written()
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { written() }}
		req, err := l.newRequest(httptrace.WithClientTrace(hold, trace), p, streamBody)
		if err != nil {
			opened <- err
			return
		}
		resp, err := l.client.Do(req)
		if err != nil {
			opened <- err
			return
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		_, err = r.Peek(1)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: status %d", p.name, resp.StatusCode)
		}
		opened <- err
		if err != nil {
			return
		}
		// Hold the stream: read until the harness lets go.
		_, _ = io.Copy(io.Discard, r)
	}
	wg.Go(func() {
		for range n {
			select {
			case sem <- struct{}{}:
				wg.Go(openOne)
			case <-hold.Done():
				opened <- hold.Err()
			}
		}
	})
	open := 0
	var firstErr error
	timeout := time.After(2 * time.Minute)
	for range n {
		select {
		case err := <-opened:
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil {
				open++
			}
		case <-timeout:
			firstErr = fmt.Errorf("only %d of %d streams opened within 2m", open, n)
		}
		if firstErr != nil {
			break
		}
	}
	if firstErr == nil {
		firstErr = ready(open)
	}
	release()
	wg.Wait()
	return open, firstErr
}
