import type { Command } from '../command';
import { agentsCommand } from './agents';
import { configCommand } from './config';
import { modelCommand } from './model';
import { stackCommand } from './stack';
import { trainCommand } from './train';
import { warmStartCommand } from './warm-start';

/** Every `anvil` command, in the order `anvil --help` lists them. */
export const COMMANDS: Command[] = [trainCommand, stackCommand, warmStartCommand, modelCommand, agentsCommand, configCommand];
