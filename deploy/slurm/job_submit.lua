-- Allot's submission check for slurmctld (JobSubmitPlugins=lua).
--
-- Reads the policy snapshot Allot publishes (manage.py allot_slurm_policy) with loadfile: no
-- network call, ever (this runs inside slurmctld while it holds its locks). The snapshot is
-- re-read at most every RELOAD seconds and swapped in only when its version changes; if it is
-- missing or broken, the last good one keeps serving. Jobs of root (uid 0) are not checked.
-- Refuses, with a message saying what to do: an account Allot does not manage or has archived, a
-- QOS the account may not use or a time limit above the QOS's, more GPUs of a type than the account
-- could ever hold (counted over every form of GPU request), and an interactive job (salloc/srun)
-- without a time limit within the interactive tier's. An untyped GPU request on an account with quota
-- for one GPU type is made that type (so it runs on, and is counted against, that type's limits).

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

local function given(value, none)  -- a count the user set, or nil (unset fields hold NO_VAL / NO_VAL16)
  if value == nil or value == none or value == slurm.NO_VAL or value == slurm.NO_VAL16 or value < 1 then
    return nil
  end
  return value
end

-- How many times a per-node / per-task / per-socket request counts for the whole job.
local function times(job_desc, field)
  local nodes = given(job_desc.min_nodes) or 1
  if field == "tres_per_node" then return nodes end
  if field == "tres_per_task" then
    local per_node = given(job_desc.ntasks_per_node, slurm.NO_VAL16)
    return given(job_desc.num_tasks) or (per_node and per_node * nodes) or nodes
  end
  if field == "tres_per_socket" then
    return (given(job_desc.sockets_per_node, slurm.NO_VAL16) or 1) * nodes
  end
  return 1  -- tres_per_job (--gpus)
end

-- GPUs asked for, per type ("" for untyped), from every form a job can ask in: --gres and
-- --gpus-per-node (per node × nodes), --gpus (per job), --gpus-per-task (× tasks), --gpus-per-socket
-- (× sockets per node × nodes). Items look like "gres:gpu:a100:4", "gres/gpu:a100=4", "gres:gpu:4",
-- "gres/gpu=4", several separated by commas.
local GPU_FIELDS = {"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}

local function gpus(job_desc)
  local found = {}
  for _, field in ipairs(GPU_FIELDS) do
    local spec = job_desc[field]
    if spec ~= nil and spec ~= "" then
      for item in string.gmatch(spec, "[^,]+") do
        local kind, count = string.match(item, "^gres[:/]gpu:?([%w%-_]*)[:=](%d+)$")
        if count ~= nil then
          found[kind] = (found[kind] or 0) + tonumber(count) * times(job_desc, field)
        end
      end
    end
  end
  return found
end

-- The one GPU type an account has quota for, or nil (none, or several).
local function only_type(account)
  local only = nil
  for kind, limit in pairs(account.gpus) do
    if limit > 0 then
      if only ~= nil then return nil end
      only = kind
    end
  end
  return only
end

-- Untyped GPU requests made `kind`: Slurm then places them on those GPUs and counts them against the
-- account's typed QOS limits (an untyped request counts against no gres/gpu:<type> limit).
local function type_untyped(job_desc, kind)
  for _, field in ipairs(GPU_FIELDS) do
    local spec = job_desc[field]
    if spec ~= nil and spec ~= "" then
      local items, changed = {}, false
      for item in string.gmatch(spec, "[^,]+") do
        local prefix, sep, count = string.match(item, "^(gres[:/]gpu)([:=])(%d+)$")
        if count ~= nil then
          item = prefix .. ":" .. kind .. sep .. count
          changed = true
        end
        items[#items + 1] = item
      end
      if changed then job_desc[field] = table.concat(items, ",") end
    end
  end
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
    local wall = (p.qos_max_minutes or {})[string.lower(qos)]
    local asked = given(job_desc.time_limit)
    if wall ~= nil and asked ~= nil and asked > wall then
      return refuse("QOS %s allows jobs of at most %d minutes (%d asked): add -t %d or less, or use another QOS",
        qos, wall, asked, wall)
    end
  end
  local only = only_type(account)
  if only ~= nil then type_untyped(job_desc, only) end
  local most = 0
  for _, limit in pairs(account.gpus) do if limit > most then most = limit end end
  for kind, count in pairs(gpus(job_desc)) do
    local limit = most
    if kind ~= "" then limit = account.gpus[kind] or 0 end
    local what = kind ~= "" and (string.upper(kind) .. " ") or ""
    if limit == 0 then
      return refuse("account %s (%s) has no %sGPU quota: ask your team lead for one in Allot, or use another account",
        name, account.path, what)
    end
    if count > limit then
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
