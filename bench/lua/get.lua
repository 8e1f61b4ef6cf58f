-- wrk script for `bench h2`'s HTTP/1.1 rows of GET bodies: GET the URL's path, then write
-- wrk's summary as JSON exactly as post_json.lua does (its done() hook is reused, loaded from
-- the folder this script lives in).
--
-- Environment: BENCH_WRK_JSON, where done() writes the summary (see post_json.lua).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "post_json.lua")

wrk.method = "GET"
wrk.body = nil
wrk.headers["Content-Type"] = nil
