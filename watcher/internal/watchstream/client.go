package watchstream

import (
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// NewClient returns the REST client an informer lists and watches with:
// config as the dynamic client takes it (JSON), without client-side
// throttling and uncompressed, over a transport of its own whose HTTP/2
// connections every watch shares (dial.go).
//
// client-go never throttles watches, and so not a watch-list, which is
// how an informer starts where the apiserver serves it; the paginated
// lists of a replay, or of an apiserver without watch-lists, go
// unthrottled too, so that a start with thousands of resources is paced
// by the apiserver's priority and fairness (429, which the caller retries
// after a backoff) rather than by the client's QPS. Compression is off
// because the apiserver gzips a watch stream for a client that accepts
// it, and each open stream's reader then holds its window and buffers
// for the stream's life, most of the heap a quiet watch costs, to save
// bandwidth on events of a few KiB (`make bench -sections crds` measures
// the heap a watched resource).
func NewClient(config *rest.Config) (rest.Interface, error) {
	cfg := dynamic.ConfigFor(config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	cfg.DisableCompression = true
	gt, err := newGatedTransport(cfg)
	if err != nil {
		return nil, fmt.Errorf("watch client: %w", err)
	}
	if gt != nil {
		// The transport holds the TLS settings (see dial.go).
		cfg.Transport = gt
		cfg.TLSClientConfig = rest.TLSClientConfig{}
	}
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("watch client: %w", err)
	}
	return rc, nil
}
