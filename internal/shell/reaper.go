package shell

// ReapMode says what a child subreaper ([EnableSubreaper]) does with the
// orphaned processes the kernel hands it.
type ReapMode int

const (
	// ReapSteps kills what each step leaves behind when it ends and reaps
	// those processes; other orphans are left alone, so that child
	// processes the rest of the program starts and waits for are never
	// reaped behind its back. Processes are attributed to a step by a
	// variable in their environment ([EnvStepToken]) or by descending from
	// one that has it.
	ReapSteps ReapMode = iota + 1
	// ReapAll does what ReapSteps does and also reaps every other orphan,
	// and kills, when a step ends, the orphans no running step owns (a
	// process that cleared its environment). For a program whose only child
	// processes are steps: an agent that is PID 1 of its container, which
	// must reap whatever is orphaned in it.
	ReapAll
)

// EnvStepToken is set in the environment of every step while a subreaper
// is enabled: a random token that marks the step's processes, so that the
// ones it leaves behind are found and killed when it ends.
const EnvStepToken = "JETFLEET_STEP"
