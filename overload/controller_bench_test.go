package overload_test

import (
	"context"
	"testing"

	"github.com/edgegate/gateway/overload"
)

// BenchmarkAdmitRelease is what the block costs a request under its
// limit: one Admit and one Release, nobody waiting; in parallel, what
// requests pay contending for the controller's lock.
func BenchmarkAdmitRelease(b *testing.B) {
	for _, bc := range []struct {
		name string
		o    overload.Options
	}{
		{"static", overload.Options{MaxInFlight: 1 << 20}},
		{"adaptive", overload.Options{Adaptive: true, MinLimit: 1 << 19, MaxInFlight: 1 << 20}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := overload.New(bc.o)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				a, r := c.Admit(ctx, overload.Default, "tenant")
				if r != overload.Admitted {
					b.Fatal(r)
				}
				a.Release()
			}
		})
		b.Run(bc.name+"_parallel", func(b *testing.B) {
			c, err := overload.New(bc.o)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a, r := c.Admit(ctx, overload.Default, "tenant")
					if r != overload.Admitted {
						b.Fatal(r)
					}
					a.Release()
				}
			})
		})
	}
}
