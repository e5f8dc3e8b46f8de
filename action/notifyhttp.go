package action

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxResponseBody bounds what the notification actions read of an answer
// (an API's JSON result, an error's text).
const maxResponseBody = 64 << 10

// postJSON POSTs body (JSON) to rawURL through client within timeout and
// returns the answer's body, up to maxResponseBody bytes. A non-2xx answer
// is a delivery error that quotes the start of its body: permanent for a
// 4xx other than 408 and 429 (and for a redirect), after the Retry-After
// the receiver asked for otherwise. Errors name the URL's scheme and host
// only: its path or query may be the secret (a Slack or Teams webhook).
func postJSON(ctx context.Context, client *http.Client, rawURL string, timeout time.Duration, body []byte, header http.Header) ([]byte, error) {
	safe := safeURL(rawURL)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return nil, permanent(fmt.Errorf("post %s: bad URL", safe))
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "fieldwatch")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // it quotes the whole URL
		}
		return nil, fmt.Errorf("post %s: %w", safe, err)
	}
	defer drainClose(resp.Body)
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return answer, nil
	}
	return answer, httpError(safe, resp, answer)
}

// httpError is the delivery error of a non-2xx answer.
func httpError(safe string, resp *http.Response, answer []byte) error {
	msg := fmt.Sprintf("post %s: %s", safe, resp.Status)
	if s := strings.TrimSpace(strings.ToValidUTF8(string(answer), "")); s != "" {
		msg += ": " + truncateBytes(s, 256)
	}
	code := resp.StatusCode
	return &deliveryError{
		err:        errors.New(msg),
		permanent:  httpStatusPermanent(code) || (code >= 300 && code < 400),
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}
