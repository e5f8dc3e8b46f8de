package fieldmetrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// chunkSize is how many series one encoded piece of a family holds: the
// exposition's memory is bounded by it, whatever the number of series.
const chunkSize = 1024

// Handler returns the HTTP handler of the series: the text format or
// OpenMetrics, as the scraper asks (Accept), written with client_golang's
// exposition code (expfmt). A family is encoded in pieces of chunkSize
// series, the HELP and TYPE lines written once, so that what a scrape
// holds in memory does not grow with the series. When serve returns
// false (a standby replica) it answers with no series.
func (s *Scraper) Handler(src Source, serve func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		format := expfmt.NegotiateIncludingOpenMetrics(r.Header)
		w.Header().Set("Content-Type", string(format))
		p := newPipe(w)
		cw := &continuation{w: p}
		enc := newEncoder(cw, format)
		if serve == nil || serve() {
			ch := newChunker(enc, cw)
			if err := s.scrape(r.Context(), src, ch); err == nil {
				_ = ch.flush()
			}
		}
		if c, ok := enc.(expfmt.Closer); ok {
			_ = c.Close()
		}
		_ = p.close()
	})
}

// newEncoder returns expfmt's encoder of format, without the escaping
// of names the format may ask for: every metric and label name a Set
// exposes is a valid legacy name (Compile refuses others, and names read
// from objects are sanitized), which no scheme changes, and checking
// each series' names for it took a tenth of a scrape (BenchmarkScrape).
func newEncoder(w io.Writer, format expfmt.Format) expfmt.Encoder {
	return expfmt.NewEncoder(w, format.WithEscapingScheme(model.NoEscaping))
}

// The pipe's buffers: pipeBuffers of about pipeFlush bytes each.
const (
	pipeBuffers = 4
	pipeFlush   = 256 << 10
)

// pipe hands what is written to it, in buffers of about pipeFlush bytes,
// to a goroutine that writes them to w: encoding the next piece of a
// scrape and writing the last to the network overlap. At most
// pipeBuffers buffers exist. Once a write to w fails, Write fails too, so
// that the scrape stops.
type pipe struct {
	cur    *bytes.Buffer
	full   chan *bytes.Buffer
	free   chan *bytes.Buffer
	done   chan struct{}
	err    error // the writer's first error, read once done is closed
	failed atomic.Bool
}

func newPipe(w io.Writer) *pipe {
	p := &pipe{full: make(chan *bytes.Buffer, pipeBuffers), free: make(chan *bytes.Buffer, pipeBuffers), done: make(chan struct{})}
	for range pipeBuffers - 1 {
		p.free <- bytes.NewBuffer(make([]byte, 0, pipeFlush+pipeFlush/4))
	}
	p.cur = bytes.NewBuffer(make([]byte, 0, pipeFlush+pipeFlush/4))
	go func() {
		defer close(p.done)
		for b := range p.full {
			if p.err == nil {
				if _, p.err = w.Write(b.Bytes()); p.err != nil {
					p.failed.Store(true)
				}
			}
			b.Reset()
			p.free <- b
		}
	}()
	return p
}

func (p *pipe) Write(b []byte) (int, error) {
	if p.failed.Load() {
		return 0, errors.New("the scraper went away")
	}
	p.cur.Write(b)
	if p.cur.Len() >= pipeFlush {
		p.full <- p.cur
		p.cur = <-p.free
	}
	return len(b), nil
}

// close writes what is left and waits for the writer; it returns its
// error.
func (p *pipe) close() error {
	if p.cur.Len() > 0 {
		p.full <- p.cur
	}
	close(p.full)
	<-p.done
	return p.err
}

// WriteTo writes the series to w in format (tests, `fieldwatch test`).
func (s *Scraper) WriteTo(ctx context.Context, src Source, w io.Writer, format expfmt.Format) error {
	cw := &continuation{w: w}
	enc := newEncoder(cw, format)
	ch := newChunker(enc, cw)
	err := s.scrape(ctx, src, ch)
	if err == nil {
		err = ch.flush()
	}
	if c, ok := enc.(expfmt.Closer); ok && err == nil {
		err = c.Close()
	}
	return err
}

// continuation passes writes through, except that after skipHeader it
// drops everything up to and including the next newline: the TYPE line
// expfmt writes for each further piece of a family.
type continuation struct {
	w    io.Writer
	skip bool
}

func (c *continuation) Write(p []byte) (int, error) {
	n := len(p)
	if c.skip {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return n, nil
		}
		c.skip = false
		p = p[i+1:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if _, err := c.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// chunker builds the dto pieces of a family and encodes them. Its dto
// values are allocated once and reused: a scrape allocates per piece, not
// per series.
type chunker struct {
	enc  expfmt.Encoder
	cw   *continuation
	fam  *Family
	mf   dto.MetricFamily
	name string
	help string
	typ  dto.MetricType
	// pieces counts the pieces of the current family encoded.
	pieces  int
	n       int
	metrics []*dto.Metric
	gauges  []dto.Gauge
	values  []float64
	pairs   []dto.LabelPair
	strs    []string
	ptrs    []*dto.LabelPair
	used    int // of pairs and strs
	metArr  []dto.Metric
}

func newChunker(enc expfmt.Encoder, cw *continuation) *chunker {
	c := &chunker{enc: enc, cw: cw, typ: dto.MetricType_GAUGE}
	c.metArr = make([]dto.Metric, chunkSize)
	c.gauges = make([]dto.Gauge, chunkSize)
	c.values = make([]float64, chunkSize)
	c.metrics = make([]*dto.Metric, chunkSize)
	for i := range c.metArr {
		c.metrics[i] = &c.metArr[i]
	}
	return c
}

func (c *chunker) begin(f *Family) error {
	if err := c.flush(); err != nil {
		return err
	}
	c.fam, c.pieces = f, 0
	c.name, c.help = f.Name, f.Help
	return nil
}

func (c *chunker) series(_ *Family, labels []outLabel, value float64) error {
	if c.n == chunkSize {
		if err := c.flush(); err != nil {
			return err
		}
	}
	if c.used+len(labels) > len(c.pairs) {
		grow := max(len(c.pairs)*2, chunkSize*8, c.used+len(labels))
		// Earlier metrics of this piece point into the old arrays,
		// which stay alive through them.
		c.pairs = make([]dto.LabelPair, grow)
		c.strs = make([]string, 2*grow)
		c.used = 0
	}
	m := c.metrics[c.n]
	start := len(c.ptrs)
	for _, l := range labels {
		p := &c.pairs[c.used]
		c.strs[2*c.used], c.strs[2*c.used+1] = l.Name, l.Value
		p.Name, p.Value = &c.strs[2*c.used], &c.strs[2*c.used+1]
		c.ptrs = append(c.ptrs, p)
		c.used++
	}
	m.Label = c.ptrs[start:len(c.ptrs):len(c.ptrs)]
	c.values[c.n] = value
	c.gauges[c.n].Value = &c.values[c.n]
	m.Gauge = &c.gauges[c.n]
	c.n++
	return nil
}

// flush encodes the series collected so far as one piece of the family.
func (c *chunker) flush() error {
	if c.n == 0 {
		return nil
	}
	c.mf.Name = &c.name
	c.mf.Type = &c.typ
	c.mf.Help = nil
	if c.pieces == 0 {
		c.mf.Help = &c.help
	} else {
		c.cw.skip = true // the piece's TYPE line
	}
	c.mf.Metric = c.metrics[:c.n]
	err := c.enc.Encode(&c.mf)
	c.cw.skip = false
	c.pieces++
	c.n, c.used = 0, 0
	c.ptrs = c.ptrs[:0]
	return err
}

// Collector returns a prometheus.Collector of the series, for a
// prometheus.Registry: every series in one Gather, which holds them all
// in memory at once (Handler does not). Its Describe sends nothing (the
// label names of a family vary from series to series): the collector is
// unchecked.
func (s *Scraper) Collector(src Source) prometheus.Collector {
	return &collector{s: s, src: src}
}

type collector struct {
	s   *Scraper
	src Source
}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	_ = c.s.scrape(context.Background(), c.src, &collectEmitter{ch: ch, descs: map[*Family]*prometheus.Desc{}})
}

type collectEmitter struct {
	ch    chan<- prometheus.Metric
	descs map[*Family]*prometheus.Desc
}

func (e *collectEmitter) begin(f *Family) error {
	e.descs[f] = prometheus.NewDesc(f.Name, f.Help, nil, nil)
	return nil
}

func (e *collectEmitter) series(f *Family, labels []outLabel, value float64) error {
	m := &seriesMetric{desc: e.descs[f], value: value}
	for _, l := range labels {
		name, val := l.Name, l.Value
		m.labels = append(m.labels, &dto.LabelPair{Name: &name, Value: &val})
	}
	e.ch <- m
	return nil
}

// seriesMetric is one series as a prometheus.Metric.
type seriesMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
}

func (m *seriesMetric) Desc() *prometheus.Desc { return m.desc }

func (m *seriesMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	v := m.value
	out.Gauge = &dto.Gauge{Value: &v}
	return nil
}
