"""Hierarchical decisions: options (learned or scripted skills), their termination, and the semi-MDP
returns the high level learns from. `tinker_core.algos.hppo.HPPO` is the algorithm built from them
(its settings: `tinker_core.algos.hppo_config.HPPOConfig`)."""

from tinker_core.hierarchy.skills import SkillLibrary, make_skill, register_skill, register_skill_set, registered_skills
from tinker_core.hierarchy.smdp import discounted_sum, gae, smdp_gae

__all__ = ["SkillLibrary", "make_skill", "register_skill", "register_skill_set", "registered_skills", "smdp_gae",
           "gae", "discounted_sum"]
