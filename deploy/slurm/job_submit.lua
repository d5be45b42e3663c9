-- Allot's submission check for slurmctld (JobSubmitPlugins=lua).
--
-- Reads the policy snapshot Allot publishes (manage.py allot_slurm_policy) with loadfile: no
-- network call, ever (this runs inside slurmctld while it holds its locks). The snapshot is
-- re-read at most every RELOAD seconds and swapped in only when its version changes; if it is
-- missing or broken, the last good one keeps serving. Jobs of root (uid 0) are not checked.
-- Refuses, with a message saying what to do: an account Allot does not manage or has archived, a
-- QOS the account may not use or a time limit above the QOS's, more GPUs of a type than the account
-- could ever hold (counted over every form of GPU request, a type without a count being one per
-- node / task / job as Slurm reads it, and over all components of a heterogeneous job), more GPUs
-- than the QOS the job runs under lets it hold (the components under that QOS, for a heterogeneous
-- job; a job runs under one QOS and Slurm limits each QOS
-- on its own: such a job would pend forever; the message names the largest job the account can
-- run), GPUs in a QOS that carries none (tier QOS: GPU jobs run under the unit's own QOS), an
-- untyped GPU request on an account with quota for several types, --ntasks-per-gpu with -n and no typed
-- GPU count (Slurm would allocate GPUs of any type, counted against no typed limit), and an interactive job
-- (salloc/srun) without a time limit within the interactive tier's. A job with whole nodes (--exclusive, or
-- a partition with OverSubscribe=EXCLUSIVE) is counted with every GPU of its nodes, as slurmctld allocates it. An untyped GPU request on an
-- account with quota for one GPU type is made that type (so it runs on, and is counted against,
-- that type's limits). A change to a submitted job (scontrol update: account, QOS, GPUs) is checked
-- the same way, on the job as it would be after the change.

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
      if ok and type(fresh) == "table" and
          (cache == nil or fresh.version ~= cache.version or fresh.inventory ~= cache.inventory) then
        cache = fresh
      end
    end
  end
  return cache
end

-- The user reads the reason at submission; a refused change (scontrol update) shows only Slurm's
-- "Unspecified error" in 22.05, so every reason also goes to slurmctld's log.
local function refuse(fmt, ...)
  slurm.log_user("Allot: " .. fmt, ...)
  slurm.log_info("Allot refused: " .. fmt, ...)
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
        local kind, count = string.match(item, "^gres[:/]gpu:?([%w%-_%.]*)[:=](%d+)$")
        if count == nil then  -- a type without a count ("gres:gpu:a100", "gres:gpu"): one, as Slurm reads it
          kind = string.match(item, "^gres[:/]gpu:?([%w%-_%.]*)$")
          if kind ~= nil then count = "1" end
        end
        if count ~= nil then
          found[kind] = (found[kind] or 0) + tonumber(count) * times(job_desc, field)
        end
      end
    end
  end
  return found
end

-- --ntasks-per-gpu with -n and no GPU count: slurmctld allocates ceil(tasks / n) GPUs of no type, which
-- count against none of the typed gres/gpu:<type> limits Allot's QOS carry and may land on any type.
-- Returns that count, or nil when the job names its GPUs (--gpus=<type>:<n> --ntasks-per-gpu=<k>
-- derives the tasks from typed GPUs, which gpus() counts).
local function untyped_per_gpu(job_desc, asked)
  local per = given(job_desc.ntasks_per_tres, slurm.NO_VAL16) or given(job_desc.ntasks_per_gpu, slurm.NO_VAL16)
  if per == nil or next(asked) ~= nil then return nil end
  local tasks = times(job_desc, "tres_per_task")
  return math.ceil(tasks / per), per, tasks
end

-- The components of a heterogeneous job reach slurm_job_submit one after another in one request
-- (het_job_offset 0, 1, ...; slurmctld holds its job lock throughout): what the earlier components
-- of the same request asked is added to each later one's.
-- Each QOS limits what runs under it on its own, so the components under one QOS are added up for that
-- QOS's limit, and all of them for the account's ceiling. A batch hetjob's later components carry no
-- script (only the first does): they are batch work too, not interactive.
local het = {uid = nil, account = nil, gpus = {}, by_qos = {}, batch = false}

local function added(a, b)
  local total = {}
  for kind, count in pairs(a) do total[kind] = count end
  for kind, count in pairs(b) do total[kind] = (total[kind] or 0) + count end
  return total
end

-- Returns what counts against the account's ceiling, what counts against this component's QOS, and
-- whether the job is batch work.
local function with_het(job_desc, submit_uid, name, asked, qos)
  local offset = job_desc.het_job_offset
  if offset == nil or offset == slurm.NO_VAL then return asked, asked, job_desc.script ~= nil end
  if offset == 0 or het.uid ~= submit_uid or het.account ~= name then
    het = {uid = submit_uid, account = name, gpus = {}, by_qos = {}, batch = job_desc.script ~= nil}
  end
  het.gpus = added(het.gpus, asked)
  het.by_qos[qos or ""] = added(het.by_qos[qos or ""] or {}, asked)
  return het.gpus, het.by_qos[qos or ""], het.batch or job_desc.script ~= nil
end

-- A table's keys in order: the first refusal a job meets is the same on every submission.
local function sorted_keys(t)
  local keys = {}
  for k, _ in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
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
        elseif string.match(item, "^gres[:/]gpu$") then  -- --gres=gpu: one, as Slurm reads it
          item = item .. ":" .. kind
          changed = true
        end
        items[#items + 1] = item
      end
      if changed then job_desc[field] = table.concat(items, ",") end
    end
  end
end

-- The largest job, per GPU type, that account can run: what its own QOS let one job hold at once.
local function largest(account)
  local best, where = {}, {}
  for name, limits in pairs(account.qos_gpus or {}) do
    for kind, limit in pairs(limits) do
      if limit > (best[kind] or 0) then best[kind], where[kind] = limit, name end
    end
  end
  return best, where
end

-- The checks every job passes, at submission and after a change. ``job`` reads like job_desc;
-- ``asked`` is its GPUs per type (every component of a heterogeneous job added up), ``in_qos`` what
-- counts against the QOS it runs under (a heterogeneous job's components under that QOS; default: asked).
-- Returns why the job is refused, or nil.
local function check(p, job, name, asked, in_qos)
  in_qos = in_qos or asked
  for _, archived in ipairs(p.archived or {}) do
    if archived == name then
      return string.format("account %s belongs to an archived unit: use your current team's account", name)
    end
  end
  local account = p.accounts[name]
  if account == nil then
    return string.format("account %s is not managed by Allot: use your team's account (-A)", name)
  end
  local qos = job.qos
  if qos ~= nil and qos ~= "" then
    qos = string.lower(qos)
    local allowed = false
    for _, q in ipairs(account.qos) do if q == qos then allowed = true end end
    if not allowed then
      return string.format("account %s may not use QOS %s; it may use: %s", name, qos, table.concat(account.qos, ", "))
    end
    local wall = (p.qos_max_minutes or {})[qos]
    local want = given(job.time_limit)
    if wall ~= nil and want ~= nil and want > wall then
      return string.format("QOS %s allows jobs of at most %d minutes (%d asked): add -t %d or less, or use another QOS",
        qos, wall, want, wall)
    end
  else
    qos = account.default_qos
  end
  local most, kinds = 0, 0
  for _, limit in pairs(account.gpus) do
    if limit > most then most = limit end
    if limit > 0 then kinds = kinds + 1 end
  end
  local best, where = largest(account)
  for _, kind in ipairs(sorted_keys(asked)) do
    local count = asked[kind]
    local limit = most
    if kind ~= "" then limit = account.gpus[kind] or 0 end
    local what = kind ~= "" and (string.upper(kind) .. " ") or ""
    if limit == 0 then
      return string.format("account %s (%s) has no %sGPU quota: ask your team lead for one in Allot, or use another account",
        name, account.path, what)
    end
    if count > limit then
      return string.format("%d %sGPUs is more than account %s (%s) can ever hold: %d; ask for at most %d or request a larger quota",
        count, what, name, account.path, limit, limit)
    end
    if kind == "" and kinds > 1 then
      return string.format("account %s has quota for several GPU types: name one, e.g. --gres=gpu:<type>:%d", name, count)
    end
  end
  -- MIG slices: each profile is a type of its own; added up by weight (millionths of a GPU-equivalent) the
  -- profiles of one flavor must fit its GPU-equivalents
  local weighed = {}
  for kind, count in pairs(asked) do
    local slice = (p.slices or {})[kind]
    if slice ~= nil then weighed[slice.flavor] = (weighed[slice.flavor] or 0) + count * slice.micro end
  end
  for _, flavor in ipairs(sorted_keys(weighed)) do
    local most = (account.equivalents or {})[flavor] or 0
    if weighed[flavor] > most * 1000000 then
      return string.format("MIG slices weighing %.2f GPU-equivalents of %s are more than account %s (%s) can ever " ..
        "hold: %d; ask for fewer or smaller slices, or request a larger quota",
        weighed[flavor] / 1000000, string.upper(flavor), name, account.path, most)
    end
  end
  for _, kind in ipairs(sorted_keys(in_qos)) do
    local count = in_qos[kind]
    local what = kind ~= "" and (string.upper(kind) .. " ") or ""
    local budgets = account.budget_denied or {}
    local spent = budgets[kind]
    if kind == "" then
      for _, words in pairs(budgets) do spent = words end
    end
    if spent ~= nil then
      return string.format("account %s: %s", name, spent)
    end
    for _, free in ipairs(p.qos_without_gpus or {}) do
      if free == qos then
        local own = {}
        for q, _ in pairs(account.qos_gpus or {}) do own[#own + 1] = q end
        table.sort(own)
        return string.format("QOS %s carries no GPUs (its GPUs would count against no unit's quota): run GPU jobs under %s",
          qos, table.concat(own, " or "))
      end
    end
    local here = ((account.qos_gpus or {})[qos] or {})[kind] or 0
    if count > here then
      local big = best[kind] or 0
      return string.format("%d %sGPUs can never start under QOS %s, which lets a job hold %d at once (a job runs under one " ..
        "QOS, and Slurm limits each on its own); the largest job account %s can run is %d %sGPUs (QOS %s): ask for " ..
        "at most that, or for a larger guarantee", count, what, qos, here, name, big, what, where[kind] or "none")
    end
  end
  return nil
end

-- A job that has its nodes to itself (--exclusive, or any job in a partition with OverSubscribe=EXCLUSIVE)
-- is given every GPU of each node (slurmctld allocates a whole node's generic resources), and those count
-- against its account's and QOS's limits: a CPU-only --exclusive job in a tier QOS would pend forever.
-- Returns the GPUs per type it will hold, the words that say why and what to do instead, or nil when it shares nodes (or the
-- snapshot has no node inventory). Over several partitions (-p a,b), the one whose nodes hold the fewest GPUs.
local function whole_nodes(p, job_desc)
  if p.partitions == nil then return nil end
  local names = job_desc.partition
  if names == nil or names == "" then names = p.default_partition end
  if names == nil then return nil end
  local fewest, chosen, part_name = nil, nil, nil
  for name in string.gmatch(names, "[^,]+") do
    local part = p.partitions[name]
    if part == nil then return nil end
    if job_desc.shared ~= 0 and not part.exclusive then return nil end  -- it may share a node there
    local total = 0
    for _, n in pairs(part.node_gpus) do total = total + n end
    if fewest == nil or total < fewest then fewest, chosen, part_name = total, part, name end
  end
  if chosen == nil or fewest == 0 then return nil end
  local nodes = given(job_desc.min_nodes) or 1
  local held, words = {}, {}
  for kind, n in pairs(chosen.node_gpus) do
    held[kind] = n * nodes
    words[#words + 1] = string.format("%d %s", n, string.upper(kind))
  end
  table.sort(words)
  local how, hint = "--exclusive gives a job whole nodes",
    "without --exclusive, ask for the CPUs and memory you need: -c, --mem"
  if chosen.exclusive then
    how = string.format("partition %s gives every job whole nodes", part_name)
    hint = "use a partition whose nodes the account's quota covers"
  end
  return held, string.format("%s, and with each node every GPU on it (%s a node on partition %s, %d node%s): ",
    how, table.concat(words, " + "), part_name, nodes, nodes == 1 and "" or "s"), hint
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
  local account = p.accounts[name]
  if account ~= nil then
    local only = only_type(account)
    if only ~= nil then type_untyped(job_desc, only) end
  end
  local asked = gpus(job_desc)
  local qos = job_desc.qos
  if qos == nil or qos == "" then qos = account and account.default_qos or "" else qos = string.lower(qos) end
  local untyped, per, tasks = untyped_per_gpu(job_desc, asked)
  if untyped ~= nil then
    local kind = (account and only_type(account)) or "<type>"
    return refuse("--ntasks-per-gpu=%d with %d tasks asks Slurm for %d GPUs of any type, which count against no " ..
      "GPU quota: name the type and count instead, e.g. --gpus=%s:%d --ntasks-per-gpu=%d (without -n)",
      per, tasks, untyped, kind, untyped, per)
  end
  local held, whole, hint = whole_nodes(p, job_desc)
  if held ~= nil then asked = held end
  local total, in_qos, batch = with_het(job_desc, submit_uid, name, asked, qos)
  local why = check(p, job_desc, name, total, in_qos)
  if why ~= nil then
    if whole ~= nil then
      return refuse("%s%s (%s)", whole, why, hint)
    end
    return refuse("%s", why)
  end
  local max_minutes = p.interactive_max_minutes
  if not batch and max_minutes ~= nil then
    local limit = job_desc.time_limit
    if limit == nil or limit == slurm.NO_VAL or limit > max_minutes then
      return refuse("interactive jobs need a time limit of at most %d minutes: add -t %d or less", max_minutes, max_minutes)
    end
  end
  return slurm.SUCCESS
end

-- What a changed job would look like: a field the change sets, else the job's own.
local MODIFIED = {"account", "qos", "time_limit", "min_nodes", "num_tasks", "ntasks_per_node", "sockets_per_node",
  "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then return slurm.SUCCESS end
  local touched = false
  for _, field in ipairs({"account", "qos", "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket",
                          "min_nodes", "num_tasks"}) do
    local v = job_desc[field]
    if v ~= nil and v ~= "" and v ~= slurm.NO_VAL and v ~= slurm.NO_VAL16 then touched = true end
  end
  if not touched then return slurm.SUCCESS end  -- a time limit, a name, a hold: nothing Allot counts
  local p = policy()
  if p == nil then return refuse("no policy snapshot at %s yet: ask the platform team to publish it", POLICY) end
  local view = {}
  for _, field in ipairs(MODIFIED) do
    local v = job_desc[field]
    if v == nil or v == "" or v == slurm.NO_VAL or v == slurm.NO_VAL16 then v = job_rec[field] end
    view[field] = v
  end
  if given(view.num_tasks) == nil then
    -- the job record does not carry its task count (22.05: job_rec.num_tasks is nil), so a per-task GPU
    -- change on a -n 4 job was counted once; its CPUs are an upper bound (every task has one at least)
    local cpus = string.match(job_rec.tres_fmt_req_str or "", "cpu=(%d+)")
    if cpus ~= nil then view.num_tasks = tonumber(cpus) end
  end
  local name = string.lower(view.account or "")
  local why = check(p, view, name, gpus(view))
  if why ~= nil then return refuse("%s", why) end
  return slurm.SUCCESS
end
