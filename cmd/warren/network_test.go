package main

import (
	"reflect"
	"testing"

	"github.com/warrenhq/warren/api"
)

func TestParseVolumeFlag(t *testing.T) {
	for in, want := range map[string]api.VolumeMount{
		"data:/data":       {Volume: "data", Path: "/data"},
		"data:/data:ro":    {Volume: "data", Path: "/data", ReadOnly: true},
		"data:/a/b:rw":     {Volume: "data", Path: "/a/b"},
		"my.vol:/mnt/x/y/": {Volume: "my.vol", Path: "/mnt/x/y/"},
	} {
		if got, err := parseVolumeFlag(in); err != nil || got != want {
			t.Errorf("parseVolumeFlag(%q): got %+v, %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"data", "data:", ":/data", "data:rel", "data:/d:rx"} {
		if _, err := parseVolumeFlag(in); err == nil {
			t.Errorf("parseVolumeFlag(%q): got nil, want an error", in)
		}
	}
}

func TestParseEgress(t *testing.T) {
	tests := []struct {
		in   []string
		want any
	}{
		{[]string{"none"}, "none"},
		{[]string{"open"}, "open"},
		{[]string{"10.0.0.0/8,example.com", " pypi.org "}, []any{"10.0.0.0/8", "example.com", "pypi.org"}},
		{[]string{""}, "none"},
	}
	for _, tt := range tests {
		if got, err := parseEgress(tt.in); err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseEgress(%q): got %#v, %v, want %#v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range [][]string{{"open", "10.0.0.0/8"}, {"example.com,none"}} {
		if _, err := parseEgress(in); err == nil {
			t.Errorf("parseEgress(%q): got nil, want an error", in)
		}
	}
}
