policy "monthly" {
  algorithm = "fixed-window"
  limit     = 100000
  calendar  = "month"
  window    = "720h"
  timezone  = "Europe/Atlantis"
}

policy "daily-estimate" {
  algorithm = "sliding-counter"
  limit     = 100
  window    = "24h"
  calendar  = "day"
}

policy "zone-alone" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1h"
  timezone  = "Asia/Tokyo"
}

policy "yearly" {
  algorithm = "fixed-window"
  limit     = 10
  calendar  = "year"
}
