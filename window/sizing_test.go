package window

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestSizeRejectsNonsense(t *testing.T) {
	good := Config{Generations: 8, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 1e-6}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr error
		wantMsg []string
	}{
		{"zero rate", func(c *Config) { c.FalsePositiveRate = 0 }, ErrConfig, []string{"window: invalid configuration", "false-positive rate must be in (0, 1), got 0"}},
		{"negative rate", func(c *Config) { c.FalsePositiveRate = -0.1 }, ErrConfig, []string{"got -0.1"}},
		{"rate one", func(c *Config) { c.FalsePositiveRate = 1 }, ErrConfig, []string{"must be in (0, 1), got 1"}},
		{"rate NaN", func(c *Config) { c.FalsePositiveRate = math.NaN() }, ErrConfig, []string{"got NaN"}},
		{"rate too small", func(c *Config) { c.FalsePositiveRate = 1e-20 }, ErrConfig, []string{"must be >= 1e-15"}},
		{"zero capacity", func(c *Config) { c.Capacity = 0 }, ErrConfig, []string{"capacity must be > 0"}},
		{"zero generations", func(c *Config) { c.Generations = 0 }, ErrConfig, []string{"generations must be in [1, 1024], got 0"}},
		{"too many generations", func(c *Config) { c.Generations = 5000 }, ErrConfig, []string{"got 5000"}},
		{"zero interval", func(c *Config) { c.Interval = 0 }, ErrConfig, []string{"interval must be > 0, got 0s"}},
		{"all at once", func(c *Config) { *c = Config{} }, ErrConfig, []string{"generations", "interval", "capacity", "false-positive rate"}},
		{"over the cap", func(c *Config) { c.Capacity = 1 << 40 }, ErrMemory, []string{"window: memory cap exceeded", "cap is 8589934592 bytes"}},
		{"over a custom cap", func(c *Config) { c.MaxBytes = 1024 }, ErrMemory, []string{"cap is 1024 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mutate(&cfg)
			_, err := Size(cfg)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Size error = %v, want %v", err, tt.wantErr)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not contain %q", err, m)
				}
			}
			if _, err := New(cfg); !errors.Is(err, tt.wantErr) {
				t.Errorf("New error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestSizeMeetsTarget(t *testing.T) {
	for _, tt := range []struct {
		n        int
		p        float64
		capacity uint64
	}{{1, 1e-3, 1e6}, {8, 1e-3, 1e6}, {24, 1e-3, 1e6}, {1, 1e-6, 1e6}, {8, 1e-6, 1e6}, {24, 1e-6, 1e6}, {3, 0.5, 1e6}, {1024, 1e-9, 1e3}} {
		s, err := Size(Config{Generations: tt.n, Interval: time.Second, Capacity: tt.capacity, FalsePositiveRate: tt.p})
		if err != nil {
			t.Fatal(err)
		}
		if s.PredictedFPR > tt.p*1.0000001 {
			t.Errorf("N=%d p=%g: predicted %g over target", tt.n, tt.p, s.PredictedFPR)
		}
		// Stage 0 is sized for (1-GrowthShare) of the generation's share at Capacity: the rest is
		// the stages'.
		if s.GenerationFPR > s.ShareFPR*(1-GrowthShare)*1.0000001 {
			t.Errorf("N=%d p=%g: generation rate %g over stage 0's part of the share %g", tt.n, tt.p, s.GenerationFPR, s.ShareFPR)
		}
		if s.PredictedFPR < tt.p*(1-GrowthShare)*0.9 && s.Groups >= 100 { // a few groups round up a lot
			t.Errorf("N=%d p=%g: predicted %g wastes memory", tt.n, tt.p, s.PredictedFPR)
		}
		if s.Slots != tt.n || s.K < s.Sectors || s.Sectors < 1 || s.Sectors > MaxSectors ||
			s.BitsPerGeneration != s.Groups*uint64(s.Sectors)*SectorBits {
			t.Errorf("N=%d p=%g: inconsistent sizing %+v", tt.n, tt.p, s)
		}
		if want := s.Groups * (uint64(s.Slots*s.Sectors)*64 + 8); s.TotalBytes != want {
			t.Errorf("TotalBytes = %d, want %d", s.TotalBytes, want)
		}
	}
}

func TestSizeSmallCapacity(t *testing.T) {
	s, err := Size(Config{Generations: 1, Interval: time.Second, Capacity: 1, FalsePositiveRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if s.Groups != 1 {
		t.Errorf("groups = %d, want 1", s.Groups)
	}
}
