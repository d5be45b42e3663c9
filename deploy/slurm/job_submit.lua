-- Allot's submission check for slurmctld (JobSubmitPlugins=lua).
--
-- Reads the policy snapshot Allot publishes (manage.py allot_slurm_policy) with loadfile: no
-- network call, ever (this runs inside slurmctld while it holds its locks). The snapshot is
-- re-read at most every RELOAD seconds and swapped in only when its version changes; if it is
-- missing or broken, the last good one keeps serving. Jobs of root (uid 0) are not checked.
-- Refuses, with a message saying what to do: an account Allot does not manage or has archived, a
-- QOS the account may not use, more GPUs of a type than the account could ever hold, and an
-- interactive job (salloc/srun) without a time limit within the interactive tier's.

local POLICY = os.getenv("ALLOT_SLURM_POLICY") or "/etc/slurm/allot-policy.lua"
local RELOAD = 10
local cache, checked_at = nil, -RELOAD

local function policy()
  local now = os.time()
  if now - checked_at >= RELOAD then
    checked_at = now
    local chunk = loadfile(POLICY)
    if chunk then
      local ok, fresh = pcall(chunk)
      if ok and type(fresh) == "table" and (cache == nil or fresh.version ~= cache.version) then
        cache = fresh
      end
    end
  end
  return cache
end

local function refuse(fmt, ...)
  slurm.log_user("Allot: " .. fmt, ...)
  return slurm.ERROR
end

-- GPUs asked for, per type ("" for untyped), from every tres_per_* field:
-- "gres:gpu:a100:4", "gres/gpu:a100=4", "gres:gpu:4", "gres/gpu=4", several separated by commas.
local function gpus(job_desc)
  local found = {}
  local nodes = job_desc.min_nodes
  if nodes == nil or nodes == slurm.NO_VAL or nodes < 1 then nodes = 1 end
  for _, field in ipairs({"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}) do
    local spec = job_desc[field]
    if spec ~= nil and spec ~= "" then
      for item in string.gmatch(spec, "[^,]+") do
        local kind, count = string.match(item, "^gres[:/]gpu:?([%w%-_]*)[:=](%d+)$")
        if count ~= nil then
          local n = tonumber(count)
          if field == "tres_per_node" then n = n * nodes end
          found[kind] = (found[kind] or 0) + n
        end
      end
    end
  end
  return found
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  if submit_uid == 0 then return slurm.SUCCESS end
  local p = policy()
  if p == nil then
    return refuse("no policy snapshot at %s yet: ask the platform team to publish it", POLICY)
  end
  local name = job_desc.account or job_desc.default_account
  if name == nil or name == "" then
    return refuse("name an account with -A (one your team leads set up in Allot)")
  end
  name = string.lower(name)
  for _, archived in ipairs(p.archived or {}) do
    if archived == name then
      return refuse("account %s belongs to an archived unit: use your current team's account", name)
    end
  end
  local account = p.accounts[name]
  if account == nil then
    return refuse("account %s is not managed by Allot: use your team's account (-A)", name)
  end
  local qos = job_desc.qos
  if qos ~= nil and qos ~= "" then
    local allowed = false
    for _, q in ipairs(account.qos) do if q == string.lower(qos) then allowed = true end end
    if not allowed then
      return refuse("account %s may not use QOS %s; it may use: %s", name, qos, table.concat(account.qos, ", "))
    end
  end
  local most = 0
  for _, limit in pairs(account.gpus) do if limit > most then most = limit end end
  for kind, count in pairs(gpus(job_desc)) do
    local limit = most
    if kind ~= "" then limit = account.gpus[kind] or 0 end
    if count > limit then
      local what = kind ~= "" and (kind .. " ") or ""
      return refuse("%d %sGPUs is more than account %s (%s) can ever hold: %d; ask for at most %d or request a larger quota",
        count, what, name, account.path, limit, limit)
    end
  end
  local max_minutes = p.interactive_max_minutes
  if job_desc.script == nil and max_minutes ~= nil then
    local limit = job_desc.time_limit
    if limit == nil or limit == slurm.NO_VAL or limit > max_minutes then
      return refuse("interactive jobs need a time limit of at most %d minutes: add -t %d or less", max_minutes, max_minutes)
    end
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
