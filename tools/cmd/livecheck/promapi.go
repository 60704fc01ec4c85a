package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// promAPI is a client of Prometheus's HTTP API (/api/v1). It is safe for concurrent use.
type promAPI struct {
	base   string
	client *http.Client
}

// newPromAPI returns a client for the server at base (http://host:port). Requests time out
// after 30s: the machine may be loaded.
func newPromAPI(base string) promAPI {
	return promAPI{base: base, client: &http.Client{Timeout: 30 * time.Second}}
}

// get fetches path with params and decodes the data field of a success response into out. It
// fails with Prometheus's error message on an error response.
func (a promAPI) get(ctx context.Context, path string, params url.Values, out any) error {
	u := a.base + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, bytesTrim(body))
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// sample is one point of a series.
type sample struct {
	T time.Time
	V float64
}

// series is one series of a range query's result.
type series struct {
	Labels  map[string]string
	Samples []sample
}

// finite returns the samples whose value is a number (not NaN or infinite): what Grafana draws.
func (s series) finite() []sample {
	var out []sample
	for _, p := range s.Samples {
		if !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
			out = append(out, p)
		}
	}
	return out
}

// queryRange evaluates expr at start, start+step, ... up to end (/api/v1/query_range).
func (a promAPI) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]series, error) {
	params := url.Values{
		"query": {expr}, "start": {promTime(start)}, "end": {promTime(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	if err := a.get(ctx, "/api/v1/query_range", params, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("query_range returned a %s, want a matrix", data.ResultType)
	}
	out := make([]series, 0, len(data.Result))
	for _, r := range data.Result {
		s := series{Labels: r.Metric}
		for _, v := range r.Values {
			p, err := parseSample(v)
			if err != nil {
				return nil, err
			}
			s.Samples = append(s.Samples, p)
		}
		out = append(out, s)
	}
	return out, nil
}

// parseSample decodes a [unix seconds, "value"] pair.
func parseSample(v [2]any) (sample, error) {
	ts, ok1 := v[0].(float64)
	str, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return sample{}, fmt.Errorf("malformed sample %v", v)
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return sample{}, fmt.Errorf("sample value %q: %w", str, err)
	}
	return sample{T: time.UnixMilli(int64(math.Round(ts * 1000))), V: f}, nil
}

// labelValues returns the values of label on the series match selects between start and end
// (/api/v1/label/NAME/values), as Grafana's label_values(match, label) does.
func (a promAPI) labelValues(ctx context.Context, label, match string, start, end time.Time) ([]string, error) {
	params := url.Values{"match[]": {match}, "start": {promTime(start)}, "end": {promTime(end)}}
	var out []string
	err := a.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", params, &out)
	return out, err
}

// promTime formats t as the API's Unix seconds with milliseconds.
func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
