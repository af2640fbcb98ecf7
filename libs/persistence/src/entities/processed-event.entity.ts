import { CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';
import { idColumn, timeColumn } from './columns';

/** Which consumer has applied which event: the dedupe record behind withEventOnce(). */
@Entity({ name: 'processed_events' })
export class ProcessedEvent {
  @PrimaryColumn({ ...idColumn, name: 'consumer', primaryKeyConstraintName: 'pk_processed_events' })
  consumer!: string;

  @PrimaryColumn({ ...idColumn, name: 'event_id', primaryKeyConstraintName: 'pk_processed_events' })
  eventId!: string;

  @CreateDateColumn({ ...timeColumn, name: 'processed_at' })
  processedAt!: Date;
}
