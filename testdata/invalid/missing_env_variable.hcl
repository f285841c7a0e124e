pseudonym {
  version = 1
  key "1" { secret = env("GATEWAY_TEST_UNSET_VARIABLE") }
}
