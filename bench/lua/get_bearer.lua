-- wrk script for `bench servers` and `bench load`: GET the URL's path, with an OAuth2 bearer
-- token when one is given, then write wrk's summary as JSON.
--
-- Usage: wrk ... --script bench/lua/get_bearer.lua http://127.0.0.1:8000/api/activities TOKEN
--   TOKEN (optional, after the URL) is sent as "Authorization: Bearer TOKEN" (RFC 6750 §2.1)
--   on every request; without it the requests carry no Authorization header.
--
-- The done() hook and the summary format are post_json.lua's (loaded from the same folder),
-- so every bench command reads one format; this script only turns the request into a GET.

-- --8<-- [start:request]
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "post_json.lua")

wrk.method = "GET"
wrk.body = nil
wrk.headers["Content-Type"] = nil

function init(args)
  -- args[0] is the URL; what follows it on wrk's command line comes next
  if args[1] ~= nil and args[1] ~= "" then
    wrk.headers["Authorization"] = "Bearer " .. args[1]
  end
end
-- --8<-- [end:request]
